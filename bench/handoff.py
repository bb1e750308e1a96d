"""One of several processes taking turns on one lock as fast as they can,
for bench/run. Prints a JSON list of its holds: [acquired, releasing] in
CLOCK_MONOTONIC ns (acquire returned / release about to be called).

    python bench/handoff.py lockyard|python-redis-lock URL NAME START_NS SECONDS
"""

import json
import sys
import time


def lockyard_lock(url: str, name: str):
    from lockyard.redis import Lock

    lock = Lock(url, name, ttl=30.0)
    return lock.acquire, lock.release


def python_redis_lock(url: str, name: str):
    import redis
    import redis_lock

    lock = redis_lock.Lock(redis.Redis.from_url(url), name, expire=30)
    return lock.acquire, lock.release


IMPLEMENTATIONS = {"lockyard": lockyard_lock, "python-redis-lock": python_redis_lock}


def main() -> None:
    implementation, url, name, start_ns, seconds = sys.argv[1:]
    acquire, release = IMPLEMENTATIONS[implementation](url, name)
    acquire()  # connect and load scripts before the clock starts
    release()
    # Everyone starts together, so the lock is contended from the first hold.
    time.sleep(max(0, int(start_ns) - time.monotonic_ns()) / 1e9)
    stop_ns = int(start_ns) + int(float(seconds) * 1e9)
    holds = []
    while time.monotonic_ns() < stop_ns:
        acquire()
        acquired = time.monotonic_ns()
        releasing = time.monotonic_ns()
        release()
        holds.append((acquired, releasing))
    json.dump(holds, sys.stdout)


if __name__ == "__main__":
    main()
