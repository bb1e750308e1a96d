"""Counting semaphore, limit 3, 8 processes each holding a slot 5 ms at a
time: lockyard's WaitGroup beside the PyPI peers py-redis-semaphore,
Redis-Semaphore and redis-semaphore-eval, and a floor (the least a Redis
semaphore can do: BLPOP/LPUSH on a list of tokens), in one run on one
private redis-server, each repeated 3 times (interleaved), medians printed.

    bench/.venv/bin/python bench/semaphore.py

Run it with a Python that has lockyard and redis-py (bench/.venv, which
bench/run prepares). Each peer gets a virtualenv of its own under
bench/.venv-peers/ (two of them install a module named redis_semaphore,
and redis-semaphore-eval needs redis-py < 4), created on the first run.
"""

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import RedisServer, verdict

HERE = Path(__file__).resolve().parent
PEER_VENVS = HERE / ".venv-peers"
LIMIT = 3
PROCESSES = 8
HOLD_S = 0.005
WARMUP_S = 1.0
MEASURE_S = 5.0
REPEATS = 3
CEILING = LIMIT / HOLD_S  # cycles/s if a slot never sat idle between holds
# Targets from the issue "Server cost and scale": throughput at least the
# best peer's in the same run, acquire p99 within 1.25x lockyard's own p50.
P99_OVER_P50_TARGET = 1.25
# What each peer's virtualenv gets (pinned: the versions read for the worker).
PEERS = {
    "py-redis-semaphore": ["py-redis-semaphore==0.2.0"],
    "Redis-Semaphore": ["Redis-Semaphore==0.2.2", "redis"],
    "redis-semaphore-eval": ["redis-semaphore-eval==0.3.0"],
}


def step(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def peer_python(peer: str) -> str:
    """The interpreter of the peer's own virtualenv, made on first use."""
    venv = PEER_VENVS / peer
    python = venv / "bin" / "python"
    marker = venv / "bench-requirements.txt"
    wanted = "\n".join(PEERS[peer]) + "\n"
    if not python.exists():
        step(f"creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if not marker.exists() or marker.read_text() != wanted:
        step(f"installing {' '.join(PEERS[peer])} into {venv}")
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet",
             "--disable-pip-version-check", *PEERS[peer]],
            check=True,
        )  # fmt: skip
        marker.write_text(wanted)
    return str(python)


class Run:
    """PROCESSES workers on one semaphore name, started together."""

    def __init__(self, python: str, implementation: str, url: str, name: str):
        fd, counter = tempfile.mkstemp(prefix="lockyard-semaphore-")
        os.write(fd, bytes(8))
        os.close(fd)
        command = [python, str(HERE / "semaphore_worker.py"), implementation, url,
                   name, str(LIMIT), counter, str(HOLD_S), str(WARMUP_S),
                   str(MEASURE_S)]  # fmt: skip
        workers = [
            subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            for _ in range(PROCESSES)
        ]
        try:
            # Start together, once every worker has imported and connected.
            for worker in workers:
                if worker.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"a {implementation} worker failed to start")
            start_ns = time.monotonic_ns() + 100_000_000
            for worker in workers:
                worker.stdin.write(f"{start_ns}\n")
                worker.stdin.flush()
            results = []
            for worker in workers:
                output, _ = worker.communicate(timeout=60)
                if worker.returncode != 0:
                    raise RuntimeError(f"a {implementation} worker failed")
                results.append(json.loads(output))
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait()
            os.unlink(counter)
        counts = [len(result["latencies_ns"]) for result in results]
        latencies = sorted(ms for r in results for ms in r["latencies_ns"])
        self.rate = sum(counts) / MEASURE_S
        self.p50, self.p99 = (percentile(latencies, p) / 1e6 for p in (50, 99))
        self.max = latencies[-1] / 1e6
        slept = [ns for result in results for ns in result["slept_ns"]]
        self.slept = statistics.fmean(slept) / 1e6
        self.highest = max(result["highest"] for result in results)
        self.over_limit = sum(result["over_limit"] for result in results)
        # Holds of the least served worker / an even split of all holds.
        self.min_share = min(counts) / (sum(counts) / PROCESSES)


def percentile(ordered: list[float], p: float) -> float:
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


class Implementation:
    def __init__(self, name: str, python: str):
        self.name, self.python = name, python
        self.runs: list[Run] = []

    def measure(self, url: str, repeat: int) -> None:
        self.runs.append(Run(self.python, self.name, url, f"sem-{self.name}-{repeat}"))

    def median(self, attribute: str) -> float:
        return statistics.median(getattr(run, attribute) for run in self.runs)


def print_table(implementations: list[Implementation]) -> None:
    print(f"\ncounting semaphore, limit {LIMIT}, {PROCESSES} processes, "
          f"{HOLD_S * 1e3:g} ms hold, ceiling {CEILING:.0f} cycles/s; medians of "
          f"{REPEATS} runs of {MEASURE_S:g} s (after {WARMUP_S:g} s warm-up);\n"
          f"  slept = mean time a {HOLD_S * 1e3:g} ms sleep really took (in the hold);\n"
          f"  max conc. = most holders seen at once, over = holds that saw more than "
          f"{LIMIT},\n  min share = least served process / even split "
          f"(these three: worst of the runs; holders counted in a flock'd file)")  # fmt: skip
    print(f"  {'':<22}{'cycles/s':>9}{'% ceil':>8}{'p50 ms':>8}{'p99 ms':>8}"
          f"{'max ms':>8}{'slept ms':>9}{'max conc.':>10}{'over':>6}{'min share':>10}"
          f"  cycles/s in each run")  # fmt: skip
    for impl in implementations:
        if impl.name == "floor":
            print("  reference, not a peer: redis-py BLPOP/LPUSH on a list of "
                  f"{LIMIT} tokens, no TTL")  # fmt: skip
        rate = impl.median("rate")
        print(f"  {impl.name:<22}{rate:>9.0f}{rate / CEILING:>8.1%}"
              f"{impl.median('p50'):>8.2f}{impl.median('p99'):>8.2f}"
              f"{impl.median('max'):>8.1f}{impl.median('slept'):>9.2f}"
              f"{max(run.highest for run in impl.runs):>10}"
              f"{sum(run.over_limit for run in impl.runs):>6}"
              f"{min(run.min_share for run in impl.runs):>10.2f}"
              f"  {' '.join(f'{run.rate:.0f}' for run in impl.runs)}")  # fmt: skip
    lockyard, peers = implementations[0], implementations[1:-1]
    best_peer = max(peers, key=lambda impl: impl.median("rate"))
    rate = lockyard.median("rate")
    spread = lockyard.median("p99") / lockyard.median("p50")
    print(f"  targets (lockyard): throughput ≥ the best peer's ({best_peer.name}, "
          f"{best_peer.median('rate'):.0f}/s) {verdict(rate >= best_peer.median('rate'))}, "
          f"acquire p99 ≤ {P99_OVER_P50_TARGET}× its p50 ({spread:.2f}×) "
          f"{verdict(spread <= P99_OVER_P50_TARGET)}, "
          f"zero over-limit {verdict(all(run.over_limit == 0 for run in lockyard.runs))}, "
          f"every process ≥ half its fair share "
          f"{verdict(all(run.min_share >= 0.5 for run in lockyard.runs))}")  # fmt: skip


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)
    implementations = [Implementation("lockyard", sys.executable)]
    implementations += [Implementation(peer, peer_python(peer)) for peer in PEERS]
    implementations.append(Implementation("floor", sys.executable))
    with tempfile.TemporaryDirectory(prefix="lockyard-bench-") as directory:
        server = RedisServer(directory)
        version = subprocess.run(
            ["redis-server", "--version"], check=True, capture_output=True, text=True
        ).stdout.split()[2]
        print(f"lockyard semaphore bench: redis-server {version[2:]} on {server.url}, "
              f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
              f"load average {os.getloadavg()[0]:.1f} at start")  # fmt: skip
        try:
            for repeat in range(1, REPEATS + 1):
                for impl in implementations:
                    step(f"run {repeat}/{REPEATS}: {impl.name}")
                    impl.measure(server.url, repeat)
        finally:
            server.stop()
    print_table(implementations)
    if any(run.over_limit for run in implementations[0].runs):
        sys.exit(f"lockyard: more than {LIMIT} holders at once")


if __name__ == "__main__":
    main()
