"""A job server (the source's scenario): walks the shared task list with
lockyard.redis.exclusive under its own session, runs only the tasks it
won, and skips what another server holds or has finished. Reports JSON
lines on stdout (times from CLOCK_MONOTONIC in ns).

    python job_server.py URL SERVER --tasks 12 --work 0.5 --ttl 1 \
        --lock-delay 1 --done DIR

A task is finished when DIR/<task> exists; the file is written under the
task's lock, so a task completes exactly once. The server exits once every
task is finished.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from lockyard.redis import Session, exclusive


def report(event: str, **fields) -> None:
    record = {
        "event": event,
        "lang": "py",
        "pid": os.getpid(),
        "at": time.monotonic_ns(),
    }
    sys.stdout.write(json.dumps(record | fields) + "\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("server")
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--work", type=float, default=0.5, help="seconds per task")
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--lock-delay", type=float, default=1.0)
    parser.add_argument("--done", type=Path, required=True)
    args = parser.parse_args()

    tasks = [f"task-{i:02}" for i in range(1, args.tasks + 1)]
    with Session(args.url, ttl=args.ttl, lock_delay=args.lock_delay) as session:
        report("ready", server=args.server, session=session.id)
        while not all((args.done / task).exists() for task in tasks):
            for task in exclusive(args.url, tasks, session=session):
                if (args.done / task).exists():
                    continue
                report("start", server=args.server, task=task)
                time.sleep(args.work)
                session.check_health()  # never finish a task we may have lost
                (args.done / task).write_text(args.server)
                report("done", server=args.server, task=task)
            time.sleep(0.05)


if __name__ == "__main__":
    main()
