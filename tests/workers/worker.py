"""A process that uses one lockyard Lock the way an application would, and
reports what it saw as JSON lines on stdout (one object per line, times from
CLOCK_MONOTONIC in ns, comparable between processes on one machine).

    python worker.py URL NAME --mode count --threads 3 --iterations 20 \
        --hold 0.001 --counter /tmp/counter

URL is a Redis URL, an etcd:// URL, or gs://BUCKET for a GCS lock on the
object NAME (with STORAGE_EMULATOR_HOST pointing at the emulator, and quick
backoff).

Modes:
  count  each thread, `iterations` times: take the lock, read the integer in
         the counter file, sleep `hold`, write it back plus one.
  hold   take the lock once, hold it for `hold` seconds (negative: until
         stdin closes), then report whether it is still healthy
         (check_health) and release it.
  probe  try_acquire every `interval` seconds for `hold` seconds, or until
         `iterations` successes; report each (it is released at once).
  wait   report "asking", wait for the lock (blocking, up to `timeout`),
         report "acquired", hold it for `hold` seconds, release.
"""

import argparse
import json
import os
import sys
import threading
import time

import lockyard
from lockyard.etcd import Lock as EtcdLock
from lockyard.gcs import Lock as GcsLock
from lockyard.redis import Lock

LANG = "py"
_print_lock = threading.Lock()


def now_ns() -> int:
    return time.monotonic_ns()


def report(event: str, **fields) -> None:
    record = {
        "event": event,
        "lang": LANG,
        "pid": os.getpid(),
        "thread": threading.get_ident(),
        **fields,
    }
    line = json.dumps(record)
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def count(lock: Lock, args: argparse.Namespace) -> None:
    def run() -> None:
        for _ in range(args.iterations):
            asked = now_ns()
            with lock:
                acquired = now_ns()
                fence = lock.fencing_token
                with open(args.counter) as f:
                    value = int(f.read())
                time.sleep(args.hold)
                with open(args.counter, "w") as f:
                    f.write(str(value + 1))
                releasing = now_ns()
            report(
                "hold",
                asked=asked,
                acquired=acquired,
                releasing=releasing,
                released=now_ns(),
                fence=fence,
            )

    threads = [threading.Thread(target=run) for _ in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def hold(lock: Lock, args: argparse.Namespace) -> None:
    asked = now_ns()
    if not lock.acquire(timeout=args.timeout):
        report("timeout", asked=asked, gave_up=now_ns())
        return
    report("acquired", asked=asked, acquired=now_ns(), fence=lock.fencing_token)
    if args.hold < 0:
        sys.stdin.read()
    else:
        time.sleep(args.hold)
    healthy = lock.healthy
    try:
        lock.check_health()
        check = "ok"
    except lockyard.LockUnhealthyError as error:
        check = type(error).__name__
    report(
        "checked", at=now_ns(), healthy=healthy, check=check, fence=lock.fencing_token
    )
    lock.release()
    report("released", released=now_ns())


def probe(lock: Lock, args: argparse.Namespace) -> None:
    stop_at = time.monotonic() + args.hold
    attempts = successes = 0
    while time.monotonic() < stop_at and successes < args.iterations:
        attempts += 1
        if lock.try_acquire():
            successes += 1
            report(
                "acquired",
                acquired=now_ns(),
                fence=lock.fencing_token,
                attempts=attempts,
            )
            lock.release()
        time.sleep(args.interval)
    report("probed", attempts=attempts)


def wait(lock: Lock, args: argparse.Namespace) -> None:
    asked = now_ns()
    report("asking", asked=asked)
    if not lock.acquire(timeout=args.timeout):
        report("timeout", asked=asked, gave_up=now_ns())
        return
    acquired = now_ns()
    fence = lock.fencing_token
    report("acquired", asked=asked, acquired=acquired, fence=fence)
    time.sleep(args.hold)
    releasing = now_ns()
    lock.release()
    report(
        "hold",
        asked=asked,
        acquired=acquired,
        releasing=releasing,
        released=now_ns(),
        fence=fence,
    )


MODES = {"count": count, "hold": hold, "probe": probe, "wait": wait}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("url")
    parser.add_argument("name")
    parser.add_argument("--mode", choices=MODES, default="count")
    parser.add_argument("--ttl", type=float, default=30.0)
    parser.add_argument(
        "--hold",
        type=float,
        default=0.001,
        help="seconds to hold (probe: to keep probing)",
    )
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--counter", help="file holding the shared integer (count mode)"
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="longest wait for the lock, seconds"
    )
    parser.add_argument(
        "--interval", type=float, default=0.01, help="seconds between probes"
    )
    args = parser.parse_args()

    if args.url.startswith("gs://"):
        lock = GcsLock(
            bucket_name=args.url[len("gs://") :],
            path=args.name,
            ttl=args.ttl,
            backoff_min=0.01,
            backoff_max=0.05,
        )
    elif args.url.startswith("etcd://"):
        lock = EtcdLock(args.url, args.name, ttl=args.ttl)
    else:
        lock = Lock(args.url, args.name, ttl=args.ttl)
    report("ready", at=now_ns())
    MODES[args.mode](lock, args)


if __name__ == "__main__":
    main()
