"""Python and Ruby processes share one lockyard Lock; one of them is killed
while holding it. Prints who held the lock when, and what that proves.
Then job servers share tasks under sessions (job_servers.py).

Run by scripts/demo, which starts the Redis server:  python demo/demo.py URL
(`python demo/demo.py --check` lists what is missing to run it.)
"""

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path

import job_servers
from processes import LANGUAGES, records, worker_command

LOCK_NAME = "demo"
TTL = 2.0
ROUNDS = 3
HOLD = 0.15
PROCESSES = ["py", "rb", "py", "rb", "py", "rb"]
KILL_AFTER = 0.8


def start(lang: str, url: str, log: Path, *options: str) -> subprocess.Popen:
    command = [
        *worker_command(lang, "worker"),
        url,
        LOCK_NAME,
        "--ttl",
        str(TTL),
        *options,
    ]
    return subprocess.Popen(command, stdout=log.open("w"))


def wait_for_event(log: Path, event: str, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in records(log):
            if record["event"] == event:
                return record
        time.sleep(0.01)
    sys.exit(f"demo: a worker did not report {event!r}; see {log}")


def run(url: str, directory: Path) -> tuple[list[dict], dict, int, Path]:
    """Runs the scene; returns the holds, the victim's hold, the kill time
    and the counter file."""
    counter = directory / "counter"
    counter.write_text("0")
    victim_log = directory / "victim.jsonl"
    victim = start("py", url, victim_log, "--mode", "hold", "--hold", "60")
    victim_hold = wait_for_event(victim_log, "acquired")

    logs = [directory / f"worker-{i}-{lang}.jsonl" for i, lang in enumerate(PROCESSES)]
    crowd = [
        start(
            lang,
            url,
            log,
            "--mode",
            "count",
            "--iterations",
            str(ROUNDS),
            "--hold",
            str(HOLD),
            "--counter",
            str(counter),
        )
        for lang, log in zip(PROCESSES, logs, strict=True)
    ]
    time.sleep(KILL_AFTER)
    victim.send_signal(signal.SIGKILL)
    killed_at = time.monotonic_ns()
    victim.wait()
    for worker in crowd:
        if worker.wait(60) != 0:
            sys.exit(f"demo: a worker failed (exit {worker.returncode})")
    holds = [r for log in logs for r in records(log) if r["event"] == "hold"]
    victim_hold |= {"lang": "py", "releasing": killed_at, "killed": True}
    return holds, victim_hold, killed_at, counter


def max_concurrent(holds: list[dict]) -> int:
    """Most holds in progress at one instant (from acquire returning to the
    release call)."""
    edges = sorted(
        [(hold["acquired"], 1) for hold in holds]
        + [(hold["releasing"], -1) for hold in holds]
    )
    current = highest = 0
    for _, change in edges:
        current += change
        highest = max(highest, current)
    return highest


def report(holds: list[dict], victim: dict, killed_at: int, counter: Path) -> None:
    everything = sorted([victim, *holds], key=lambda hold: hold["acquired"])
    start_ns = victim["acquired"]

    def row(
        ns: int, hold: dict, event: str, waited="", held="", token="", note=""
    ) -> tuple:
        process = f"{LANGUAGES[hold['lang']]:<6} {hold['pid']:<7}"
        when = f"+{(ns - start_ns) / 1e9:.3f}s"
        line = f"{when:>8}  {process} {event:<9} {waited:>9} {held:>9}  {token}{note}"
        return ns, line.rstrip()

    print(
        f"{len(PROCESSES) + 1} processes ({PROCESSES.count('py') + 1} Python, "
        f"{PROCESSES.count('rb')} Ruby) share the lock {LOCK_NAME!r} (ttl {TTL:g} s); "
        f"each takes it {ROUNDS}x\nto add 1 to a shared file; the first holder is "
        f"killed with SIGKILL while holding it.\n"
    )
    header = row(
        start_ns, {"lang": "py", "pid": ""}, "event", "waited", "held", "fencing token"
    )
    print(header[1].replace("+0.000s", "   time").replace("Python", "process"))
    rows = []
    for previous, hold in pairwise([None, *everything]):
        if previous is None:
            note = ""
        elif previous.get("killed"):
            note = f"  (lock free {(hold['acquired'] - killed_at) / 1e9:.2f} s after the kill)"
        else:
            note = (
                f"  (handoff {(hold['acquired'] - previous['releasing']) / 1e6:.1f} ms)"
            )
        waited = f"{(hold['acquired'] - hold['asked']) / 1e6:.1f} ms"
        rows.append(
            row(
                hold["acquired"],
                hold,
                "acquired",
                waited,
                token=hold["fence"],
                note=note,
            )
        )
        if hold.get("killed"):
            rows.append(row(killed_at, hold, "KILLED", note="kill -9 while holding"))
        else:
            held = f"{(hold['releasing'] - hold['acquired']) / 1e6:.1f} ms"
            rows.append(row(hold["releasing"], hold, "released", held=held))
    for _, line in sorted(rows, key=lambda pair: pair[0]):
        print(line)

    fences = [hold["fence"] for hold in everything]
    increasing = all(b > a for a, b in pairwise(fences))
    expected = len(PROCESSES) * ROUNDS
    count = int(counter.read_text())
    highest = max_concurrent(everything)
    ok = increasing and count == expected and highest == 1
    print(
        f"\n{'OK' if ok else 'FAILED'}: {len(everything)} holds, "
        f"max concurrent holders {highest}, fencing tokens "
        f"{'strictly increasing' if increasing else 'NOT increasing'}, "
        f"counter {count}/{expected}, killed holder's lock free again after "
        f"{(everything[1]['acquired'] - killed_at) / 1e9:.2f} s (ttl {TTL:g} s)."
    )
    if not ok:
        sys.exit(1)


def missing() -> list[str]:
    """What the demo needs and cannot find."""
    problems = []
    if shutil.which("redis-server") is None:
        problems.append("redis-server (apt install redis-server)")
    try:
        import lockyard.redis  # noqa: F401
    except ImportError:
        problems.append(f"the Python package lockyard (for {sys.executable})")
    if shutil.which("ruby") is None:
        problems.append("ruby (apt install ruby ruby-dev)")
        return problems
    ruby = [*worker_command("rb")[:-1], "-e", 'require "lockyard"']
    if subprocess.run(ruby, check=False, capture_output=True).returncode != 0:
        problems.append(f"the Ruby gem lockyard ({' '.join(ruby)} fails)")
    return problems


def main() -> None:
    if sys.argv[1:] == ["--check"]:
        problems = missing()
        print("\n".join(f"  - {problem}" for problem in problems))
        sys.exit(1 if problems else 0)
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory(prefix="lockyard-demo-") as directory:
        report(*run(sys.argv[1], Path(directory)))
    with tempfile.TemporaryDirectory(prefix="lockyard-demo-") as directory:
        job_servers.report(*job_servers.run(sys.argv[1], Path(directory)))


if __name__ == "__main__":
    main()
