"""The source's scenario: four job servers (Python and Ruby) share twelve
tasks, each taking a task's lock under its own session and skipping tasks
another server holds. One server is killed with SIGKILL mid-task; its task
comes free after its session's ttl + lock_delay and another server runs it.
Prints which server ran what, and when the orphaned task was picked up.

Run by demo.py (scripts/demo), after the lock scene.
"""

import signal
import subprocess
import sys
import time
from pathlib import Path

from processes import LANGUAGES, records, worker_command

SERVERS = ["py", "rb", "py", "rb"]
VICTIM = 1  # the first Ruby server
TASKS = 12
WORK = 0.4
TTL = 1.0
LOCK_DELAY = 1.0


def run(url: str, directory: Path) -> tuple[list[dict], int]:
    """Runs the scene; returns every report and the kill time."""
    done = directory / "done"
    done.mkdir()
    logs = [directory / f"server-{i + 1}.jsonl" for i in range(len(SERVERS))]
    options = ["--tasks", str(TASKS), "--work", str(WORK), "--ttl", str(TTL)]
    options += ["--lock-delay", str(LOCK_DELAY), "--done", str(done)]
    servers = [
        subprocess.Popen(
            [*worker_command(lang, "job_server"), url, f"server-{i + 1}", *options],
            stdout=log.open("w"),
        )
        for i, (lang, log) in enumerate(zip(SERVERS, logs, strict=True))
    ]
    # Kill the victim in the middle of its second task.
    deadline = time.monotonic() + 20
    while sum(r["event"] == "start" for r in records(logs[VICTIM])) < 2:
        if time.monotonic() > deadline:
            sys.exit(f"demo: server-{VICTIM + 1} never started a second task")
        time.sleep(0.01)
    time.sleep(WORK / 2)
    servers[VICTIM].send_signal(signal.SIGKILL)
    killed_at = time.monotonic_ns()
    servers[VICTIM].wait()
    for server in servers:
        if server is not servers[VICTIM] and server.wait(60) != 0:
            sys.exit(f"demo: a job server failed (exit {server.returncode})")
    return [r for log in logs for r in records(log)], killed_at


def report(reports: list[dict], killed_at: int) -> None:
    starts = sorted(
        (r for r in reports if r["event"] == "start"), key=lambda r: r["at"]
    )
    dones = [r for r in reports if r["event"] == "done"]
    start_ns = min(r["at"] for r in reports)
    victim = f"server-{VICTIM + 1}"
    orphan = [r for r in starts if r["server"] == victim][-1]["task"]

    def who(r: dict) -> str:
        return f"{r['server']} {LANGUAGES[r['lang']]:<6} {r['pid']:<7}"

    print(
        f"\n{len(SERVERS)} job servers ({SERVERS.count('py')} Python, {SERVERS.count('rb')} Ruby) "
        f"share {TASKS} tasks of {WORK:g} s each, every server under its own session\n"
        f"(ttl {TTL:g} s, lock_delay {LOCK_DELAY:g} s); {victim} is killed with SIGKILL "
        "in the middle of a task.\n"
    )
    print(f"{'time':>8}  {'server':<22} event")
    rows = []
    for r in starts:
        note = ""
        if r["task"] == orphan and r["server"] != victim:
            note = (
                f"   <- picked up {(r['at'] - killed_at) / 1e9:.2f} s after the kill "
                "(the lease ran out, then lock_delay)"
            )
        rows.append((r["at"], f"{who(r)} started  {r['task']}{note}"))
    for r in dones:
        rows.append((r["at"], f"{who(r)} finished {r['task']}"))
    killed = next(r for r in reports if r["server"] == victim)
    rows.append((killed_at, f"{who(killed)} KILLED   while running {orphan}"))
    for at, line in sorted(rows):
        print(f"+{(at - start_ns) / 1e9:6.3f}s  {line}")

    print("\nwho ran what:")
    for i, lang in enumerate(SERVERS):
        server = f"server-{i + 1}"
        ran = [r["task"] for r in dones if r["server"] == server]
        lost = (
            " (killed; its unfinished task went to another server)"
            if server == victim
            else ""
        )
        print(f"  {server} ({LANGUAGES[lang]}): {', '.join(ran) or '-'}{lost}")

    finished = sorted(r["task"] for r in dones)
    exactly_once = finished == [f"task-{i:02}" for i in range(1, TASKS + 1)]
    picked = [r for r in starts if r["task"] == orphan and r["server"] != victim]
    waited = (picked[0]["at"] - killed_at) / 1e9 if picked else float("nan")
    ok = exactly_once and len(picked) == 1
    print(
        f"\n{'OK' if ok else 'FAILED'}: {len(set(finished))}/{TASKS} tasks completed, "
        f"{'each exactly once' if exactly_once else 'NOT exactly once'}; the killed "
        f"server's {orphan} was picked up {waited:.2f} s after the kill "
        f"(no sooner than its lease + lock_delay, at most ttl {TTL:g} s + lock_delay {LOCK_DELAY:g} s)."
    )
    if not ok:
        sys.exit(1)
