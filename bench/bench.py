"""Measures lockyard against the raw Redis floor of each client language and
against peer libraries, all in one run on one private redis-server, and
prints medians over a few rounds. Run by bench/run, which prepares the
virtualenv this runs in.

    python bench/bench.py --ruby "ruby -I bindings-ruby/lib" --rust path/to/bench_cycle
"""

import argparse
import json
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROUNDS = 7
CYCLES = 1000
HANDOFF_PROCESSES = 4
HANDOFF_SECONDS = 1.5
# Targets from the performance issue: ratio to the same language's floor.
CYCLE_TARGET = 1.00
# Command time inside redis-server per cycle, × redis-py's Lock (issue
# "Server cost and scale").
SERVER_TARGET = 2.00
# The async cycles against their language's async client floor (issue "Async").
ASYNC_TARGET = 1.00
HANDOFF_P50_TARGET_US = 150
HANDOFF_P99_TARGET_US = 1000


class RedisServer:
    def __init__(self, directory: str):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", directory],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.1).close()
                return
            except OSError:
                time.sleep(0.01)
        raise RuntimeError("redis-server did not start")

    def census(self, command: list[str]) -> set[str]:
        """The names of the commands `command` sends (not those its scripts
        run), from the slow log of one short run that logs every command:
        INFO commandstats counts a script's own commands both on their own
        and inside the script's time, and the slow log's timing of them
        would slow the scripts down."""
        import redis

        with redis.Redis(port=self.port) as client:
            client.config_set("slowlog-max-len", 100_000)
            client.config_set("slowlog-log-slower-than", 0)
            client.slowlog_reset()
            subprocess.run(command, check=True, capture_output=True)
            client.config_set("slowlog-log-slower-than", 10_000)
            entries = client.execute_command("SLOWLOG", "GET", "-1")
            client.slowlog_reset()
        # A script's own commands are logged from the client "?:0".
        sent = {e[3][0].decode().lower() for e in entries if e[4] != b"?:0"}
        return sent - {"slowlog", "config", "info"}

    def start_counting(self) -> None:
        """Starts counting what the server spends from here on."""
        import redis

        with redis.Redis(port=self.port) as client:
            self.cpu_before = self.main_thread_cpu_us(client)
            client.config_resetstat()

    def stop_counting(self, sent: set[str]) -> tuple[float, float]:
        """Microseconds the server spent executing the commands named in
        `sent` (a script's time includes its own commands') since
        start_counting, and its main thread's CPU time (commands, sockets,
        everything)."""
        import redis

        with redis.Redis(port=self.port) as client:
            cpu = self.main_thread_cpu_us(client) - self.cpu_before
            stats = client.info("commandstats")
        busy = sum(
            stat["usec"]
            for name, stat in stats.items()
            if name.removeprefix("cmdstat_").split("|")[0] in sent
        )
        return busy, cpu

    @staticmethod
    def main_thread_cpu_us(client) -> float:
        cpu = client.info("cpu")
        return 1e6 * (
            cpu["used_cpu_user_main_thread"] + cpu["used_cpu_sys_main_thread"]
        )

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


class Cycle:
    """One uncontended acquire+release measurement: a row of the table."""

    def __init__(
        self, language: str, label: str, command: list[str], floor: bool = False
    ):
        self.language, self.label, self.command, self.floor = (
            language,
            label,
            command,
            floor,
        )
        self.samples: list[float] = []
        self.server_samples: list[float] = []
        self.cpu_samples: list[float] = []
        self.sent: set[str] | None = None

    def measure(self, server: RedisServer, key: str) -> None:
        if self.sent is None:
            self.sent = server.census(
                [*self.command, server.url, f"{key}-census", "20"]
            )
        server.start_counting()
        command = [*self.command, server.url, key, str(CYCLES)]
        result = subprocess.run(command, check=False, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr}")
        self.samples.append(float(result.stdout.split()[-1]))
        # The client runs CYCLES cycles after a warm-up of up to 100.
        busy, cpu = server.stop_counting(self.sent)
        self.server_samples.append(busy / (CYCLES + min(CYCLES, 100)))
        self.cpu_samples.append(cpu / (CYCLES + min(CYCLES, 100)))

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


class Handoff:
    """HANDOFF_PROCESSES Python processes taking turns as fast as they can."""

    def __init__(self, implementation: str):
        self.implementation = implementation
        self.gaps_us: list[
            float
        ] = []  # release call -> another process's acquire returned
        self.holds = self.reacquired = self.violations = 0

    def measure(self, url: str, key: str) -> None:
        # Start together, once every process has imported and connected.
        start_ns = time.monotonic_ns() + 1_000_000_000
        command = [sys.executable, str(HERE / "handoff.py"), self.implementation,
                   url, key, str(start_ns), str(HANDOFF_SECONDS)]  # fmt: skip
        processes = [
            subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
            for _ in range(HANDOFF_PROCESSES)
        ]
        holds = []
        for pid, process in enumerate(processes):
            output, _ = process.communicate(timeout=60)
            if process.returncode != 0:
                raise RuntimeError(f"a {self.implementation} handoff process failed")
            holds += [
                (acquired, releasing, pid) for acquired, releasing in json.loads(output)
            ]
        holds.sort()
        self.holds += len(holds)
        for (_, releasing, previous), (acquired, _, pid) in pairwise(holds):
            if acquired < releasing:
                self.violations += 1
            elif pid == previous:
                self.reacquired += 1
            else:
                self.gaps_us.append((acquired - releasing) / 1e3)

    def percentile(self, p: float) -> float:
        ordered = sorted(self.gaps_us)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def print_server_cost(cycles: list[Cycle]) -> None:
    """lockyard's command time inside redis-server against redis-py's Lock,
    round by round (the same round's two measurements share its noise)."""
    by_label = {(cycle.language, cycle.label): cycle for cycle in cycles}
    peer = by_label[("Python", "redis-py Lock")]
    for language, label in (("Python", "lockyard"), ("Ruby", "lockyard"),
                            ("Rust", "lockyard")):  # fmt: skip
        ours = by_label[(language, label)]
        ratios = [
            a / b for a, b in zip(ours.server_samples, peer.server_samples, strict=True)
        ]
        cpu = [a / b for a, b in zip(ours.cpu_samples, peer.cpu_samples, strict=True)]
        ratio = statistics.median(ratios)
        print(f"  server time, {language} lockyard × redis-py Lock: {ratio:.2f} "
              f"(target ≤ {SERVER_TARGET:.2f} {verdict(ratio <= SERVER_TARGET)}); "
              f"cpu × redis-py Lock: {statistics.median(cpu):.2f}")  # fmt: skip


def print_table(cycles: list[Cycle], handoffs: list[Handoff]) -> None:
    floors = {cycle.language: cycle for cycle in cycles if cycle.floor}
    print(f"\nuncontended acquire + release, µs per cycle (medians of {ROUNDS} rounds "
          f"of {CYCLES} cycles;\n  × = ratio to the same language's floor in the same round; "
          f"server = µs per cycle redis-server spent executing the commands clients sent;\n"
          f"  cpu = µs of redis-server's main thread per cycle, sockets included)")  # fmt: skip
    print(
        f"  {'':<11}{'':<40}{'µs':>8}{'×':>7}{'server':>8}{'cpu':>7}  {'target':<15}"
        "µs in each round"
    )
    for cycle in cycles:
        floor = floors[cycle.language]
        ratio = statistics.median(
            sample / floor_sample
            for sample, floor_sample in zip(cycle.samples, floor.samples, strict=True)
        )
        target = ""
        if cycle.label.startswith("lockyard") and cycle.language in ("Python", "Ruby"):
            target = f"≤ {CYCLE_TARGET:.2f} {verdict(ratio <= CYCLE_TARGET)}"
        if cycle.label.startswith("lockyard") and cycle.language in (
            "Rust async",
            "asyncio",
        ):
            target = f"≤ {ASYNC_TARGET:.2f} {verdict(ratio <= ASYNC_TARGET)}"
        rounds = " ".join(f"{sample:.0f}" for sample in cycle.samples)
        server = statistics.median(cycle.server_samples)
        cpu = statistics.median(cycle.cpu_samples)
        print(f"  {cycle.language:<11}{cycle.label:<40}{cycle.median:>8.1f}"
              f"{ratio:>7.2f}{server:>8.1f}{cpu:>7.1f}  {target:<15}{rounds}")  # fmt: skip
    print_server_cost(cycles)

    python_rtt = floors["Python"].median / 2
    print(f"\ncontended handoff, {HANDOFF_PROCESSES} Python processes, {ROUNDS} × "
          f"{HANDOFF_SECONDS:g} s: µs from a release call to another process's acquire "
          f"returning\n  (× = ratio to one redis-py round trip, half the Python floor: "
          f"{python_rtt:.0f} µs)")  # fmt: skip
    print(f"  {'':<22}{'p50':>8}{'p99':>8}{'max':>9}{'× p50':>7}{'holds':>8}"
          f"{'handoffs':>9}{'re-acq':>8}{'overlaps':>9}")  # fmt: skip
    for handoff in handoffs:
        p50, p99 = handoff.percentile(50), handoff.percentile(99)
        print(f"  {handoff.implementation:<22}{p50:>8.0f}{p99:>8.0f}{max(handoff.gaps_us):>9.0f}"
              f"{p50 / python_rtt:>7.2f}{handoff.holds:>8}{len(handoff.gaps_us):>9}"
              f"{handoff.reacquired:>8}{handoff.violations:>9}")  # fmt: skip
    lockyard = handoffs[0]
    print(f"  targets (lockyard): p50 ≤ {HANDOFF_P50_TARGET_US} µs "
          f"{verdict(lockyard.percentile(50) <= HANDOFF_P50_TARGET_US)}, "
          f"p99 ≤ {HANDOFF_P99_TARGET_US} µs "
          f"{verdict(lockyard.percentile(99) <= HANDOFF_P99_TARGET_US)}, "
          f"no overlapping holds {verdict(lockyard.violations == 0)}")  # fmt: skip
    print(
        "  re-acq: the releasing process took the lock again while others waited "
        "(not counted as a handoff)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--ruby", default="ruby", help="command that runs Ruby with lockyard"
    )
    parser.add_argument("--rust", required=True, help="the bench_cycle example binary")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)

    python = [sys.executable, str(HERE / "cycle.py")]
    ruby = [*shlex.split(args.ruby), str(HERE / "cycle.rb")]
    cycles = [
        Cycle(
            "Python",
            "floor: redis-py SET NX PX + EVALSHA del",
            [*python, "floor"],
            floor=True,
        ),
        Cycle("Python", "lockyard", [*python, "lockyard"]),
        Cycle("Python", "redis-py Lock", [*python, "redis-py"]),
        Cycle("Python", "python-redis-lock", [*python, "python-redis-lock"]),
        Cycle(
            "asyncio",
            "floor: redis.asyncio SET NX PX + EVALSHA del",
            [*python, "asyncio-floor"],
            floor=True,
        ),
        Cycle("asyncio", "lockyard.asyncio", [*python, "asyncio-lockyard"]),
        Cycle("asyncio", "redis.asyncio Lock", [*python, "asyncio-redis-py"]),
        Cycle(
            "Ruby",
            "floor: redis-rb SET NX PX + EVALSHA del",
            [*ruby, "floor"],
            floor=True,
        ),
        Cycle("Ruby", "lockyard", [*ruby, "lockyard"]),
        Cycle(
            "Rust",
            "floor: redis-rs SET NX PX + EVALSHA del",
            [args.rust, "floor"],
            floor=True,
        ),
        Cycle("Rust", "lockyard", [args.rust, "lockyard"]),
        Cycle(
            "Rust async",
            "floor: redis-rs async SET NX PX + EVALSHA",
            [args.rust, "floor-async"],
            floor=True,
        ),
        Cycle("Rust async", "lockyard acquire_async", [args.rust, "lockyard-async"]),
    ]
    handoffs = [Handoff("lockyard"), Handoff("python-redis-lock")]

    with tempfile.TemporaryDirectory(prefix="lockyard-bench-") as directory:
        server = RedisServer(directory)
        version = subprocess.run(
            ["redis-server", "--version"], check=True, capture_output=True, text=True
        ).stdout.split()[2]
        print(f"lockyard bench: redis-server {version[2:]} on {server.url}, "
              f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
              f"load average {os.getloadavg()[0]:.1f} at start")  # fmt: skip
        try:
            for round_number in range(1, ROUNDS + 1):
                print(
                    f"  round {round_number}/{ROUNDS} ...", file=sys.stderr, flush=True
                )
                for number, cycle in enumerate(cycles):
                    cycle.measure(server, f"bench-{number}")
                for number, handoff in enumerate(handoffs):
                    handoff.measure(server.url, f"handoff-{number}")
        finally:
            server.stop()

    print(f"  load average {os.getloadavg()[0]:.1f} at the end")
    print_table(cycles, handoffs)
    if handoffs[0].violations:
        sys.exit("lockyard: two holders at once")


if __name__ == "__main__":
    main()
