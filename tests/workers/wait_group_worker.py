"""A process that uses one lockyard WaitGroup the way an application would,
and appends what it saw to a report file as JSON lines (one object per line,
times from CLOCK_MONOTONIC in ns, comparable between processes on one
machine).

    python wait_group_worker.py URL NAME  (redis:// or etcd://) --limit 3 --reports FILE \
        --mode crowd --iterations 20 --hold 0.005 --counter /tmp/inside

Modes:
  crowd  report "ready", wait for a line on stdin, then take a slot
         `iterations` times, or for `duration` seconds when given. Inside
         each slot: count this process into the `counter` file (under
         flock, so the count is independent of Redis), sleep `hold`, count
         it out. Each hold reports the number inside, itself included.
  hold   take one slot (waiting up to `timeout`), report its token, hold it
         for `hold` seconds (negative: until a line on stdin), report its
         health, then give it back with done().
  add    take one slot and report its token, then exit without done():
         the token is for another process to adopt.
  adopt  adopt(--token), report whether it was still there, then hold and
         free it like `hold`.
  done   done(--token), from this process, which never held it.
  wait   wait() up to `timeout` for no slot to be held.
"""

import argparse
import fcntl
import json
import os
import sys
import time
from typing import TextIO

import lockyard
import lockyard.etcd
from lockyard.redis import WaitGroup


class Reports:
    def __init__(self, file: TextIO) -> None:
        self.file = file

    def __call__(self, event: str, **fields) -> None:
        record = {"event": event, "pid": os.getpid(), "at": time.monotonic_ns()}
        self.file.write(json.dumps({**record, **fields}) + "\n")
        self.file.flush()


def count_inside(counter: str, change: int) -> int:
    """Adds `change` to the number in `counter`; returns the new number."""
    with open(counter, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        inside = int(f.read() or "0") + change
        f.seek(0)
        f.truncate()
        f.write(str(inside))
        return inside


def crowd(wg: WaitGroup, args: argparse.Namespace, report: Reports) -> None:
    report("ready")
    sys.stdin.readline()
    stop_at = time.monotonic() + args.duration if args.duration else None

    def more(iterations: int) -> bool:
        if stop_at is None:
            return iterations < args.iterations
        return time.monotonic() < stop_at

    iterations = 0
    while more(iterations):
        with wg.slot(timeout=args.timeout) as slot:
            inside = count_inside(args.counter, +1)
            time.sleep(args.hold)
            count_inside(args.counter, -1)
            fence = slot.fencing_token
        report("hold", inside=inside, fence=fence)
        iterations += 1
    report("finished", holds=iterations)


def hold(wg: WaitGroup, args: argparse.Namespace, report: Reports) -> None:
    report("asking")
    try:
        token = wg.add(timeout=args.timeout)
    except lockyard.TimeoutError:
        report("timeout")
        return
    report("acquired", token=token, fence=wg.fencing_token(token))
    keep_and_free(wg, token, args, report)


def keep_and_free(
    wg: WaitGroup, token: str, args: argparse.Namespace, report: Reports
) -> None:
    """Holds the slot of `token` for `hold` seconds (negative: until a line
    on stdin), reports its health, then frees it with done()."""
    if args.hold < 0:
        sys.stdin.readline()
    else:
        time.sleep(args.hold)
    healthy = wg.healthy(token)
    try:
        wg.check_health(token)
        check = "ok"
    except lockyard.Error as error:
        check = type(error).__name__
    report("checked", healthy=healthy, check=check)
    report("done", freed=wg.done(token))


def add(wg: WaitGroup, args: argparse.Namespace, report: Reports) -> None:
    token = wg.add(timeout=args.timeout)
    report("added", token=token, fence=wg.fencing_token(token))


def adopt(wg: WaitGroup, args: argparse.Namespace, report: Reports) -> None:
    adopted = wg.adopt(args.token)
    report("adopted", adopted=adopted, fence=wg.fencing_token(args.token))
    if adopted:
        keep_and_free(wg, args.token, args, report)


def done(wg: WaitGroup, args: argparse.Namespace, report: Reports) -> None:
    report("done", freed=wg.done(args.token))


def wait(wg: WaitGroup, args: argparse.Namespace, report: Reports) -> None:
    report("asking")
    report("waited", idle=wg.wait(timeout=args.timeout))


MODES = {
    "crowd": crowd,
    "hold": hold,
    "add": add,
    "adopt": adopt,
    "done": done,
    "wait": wait,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("url")
    parser.add_argument("name")
    parser.add_argument("--limit", type=int, required=True)
    parser.add_argument("--reports", required=True, help="file to append to")
    parser.add_argument("--mode", choices=MODES, default="crowd")
    parser.add_argument("--ttl", type=float, default=30.0)
    parser.add_argument("--hold", type=float, default=0.005, help="seconds")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--duration", type=float, help="crowd: seconds to go on")
    parser.add_argument("--counter", help="crowd: file counting who is inside")
    parser.add_argument("--timeout", type=float, help="longest wait, seconds")
    parser.add_argument("--token", help="done, adopt: the token")
    args = parser.parse_args()

    # The URL picks the backend, as the lockyard command's --url does.
    group = lockyard.etcd.WaitGroup if args.url.startswith("etcd") else WaitGroup
    wg = group(args.url, args.name, limit=args.limit, ttl=args.ttl)
    with open(args.reports, "a") as reports:
        MODES[args.mode](wg, args, Reports(reports))


if __name__ == "__main__":
    main()
