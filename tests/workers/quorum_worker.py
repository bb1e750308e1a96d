"""A process that uses one lockyard.quorum.RwLock the way an application
would and reports what it saw as JSON lines on stdout (times from
CLOCK_MONOTONIC in ns, comparable between processes on one machine).

    python quorum_worker.py URL,URL,... NAME --mode count --iterations 20 \
        --hold 0.001 --counter /tmp/counter

Modes:
  count  `iterations` times: take the write lock, read the integer in the
         counter file, sleep `hold`, write it back plus one.
  read   `iterations` times: take a read lock, hold it `hold` seconds;
         report each span ("span" with start, end, mode).
  write  like read, with the write lock.
  hold   take the write lock, report "acquired" with its fencing token,
         then hold it until killed.
  wait   take the write lock (up to `timeout`), report "hold" with the
         time it was granted and its fencing token, release.
"""

import argparse
import json
import sys
import time

from lockyard.quorum import RwLock


def report(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def span(lock: RwLock, mode: str, hold: float) -> None:
    with lock.write() if mode == "write" else lock.read():
        start = time.monotonic_ns()
        time.sleep(hold)
        end = time.monotonic_ns()
    report("span", mode=mode, start=start, end=end)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("urls")
    parser.add_argument("name")
    parser.add_argument("--mode", required=True)
    parser.add_argument("--ttl", type=float, default=5.0)
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--counter")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    lock = RwLock(args.urls.split(","), args.name, ttl=args.ttl, timeout=args.timeout)
    if args.mode == "count":
        for _ in range(args.iterations):
            with lock.write():
                with open(args.counter) as file:
                    value = int(file.read() or "0")
                time.sleep(args.hold)
                with open(args.counter, "w") as file:
                    file.write(str(value + 1))
    elif args.mode in ("read", "write"):
        for _ in range(args.iterations):
            span(lock, args.mode, args.hold)
    elif args.mode == "hold":
        assert lock.acquire_write(args.timeout)
        report("acquired", fence=lock.fencing_token)
        time.sleep(3600)
    elif args.mode == "wait":
        with lock.write():
            report("hold", acquired=time.monotonic_ns(), fence=lock.fencing_token)
    else:
        sys.exit(f"unknown mode {args.mode}")
    report("done")


if __name__ == "__main__":
    main()
