"""One of several processes cycling through a counting semaphore, for
bench/semaphore.py. Runs under the interpreter of the implementation's own
virtualenv, so it imports nothing but the standard library, redis-py and
the implementation.

    python bench/semaphore_worker.py IMPLEMENTATION URL NAME LIMIT COUNTER_FILE \
        HOLD_S WARMUP_S MEASURE_S

It connects, takes and gives back one slot, prints "ready", then reads the
start time (CLOCK_MONOTONIC ns) from stdin. From then on it loops: acquire
(blocking, no timeout), add 1 to the shared counter in COUNTER_FILE (under
flock, independent of Redis) and note the value, sleep HOLD_S, subtract 1,
release. Cycles whose acquire returned within the MEASURE_S seconds after
WARMUP_S are counted. Prints JSON: for each counted cycle its acquire latency and how
long the HOLD_S sleep really took (ns), and the highest
counter value seen and how many times it exceeded LIMIT (over the whole run,
warm-up included).
"""

import fcntl
import json
import os
import sys
import time


def lockyard(url: str, name: str, limit: int):
    from lockyard.redis import WaitGroup

    group = WaitGroup(url, name, limit=limit, ttl=30.0)
    return group.add, group.done


def py_redis_semaphore(url: str, name: str, limit: int):
    # PyPI py-redis-semaphore: a Lua script per attempt, waiters BLPOP a
    # notification list (its default AcquireMode.BLPOP), heartbeat thread.
    import redis
    from redis_semaphore import Semaphore, SemaphoreConfig

    semaphore = Semaphore(
        redis.Redis.from_url(url),
        SemaphoreConfig(name=name, limit=limit, lock_timeout=30.0),
    )

    def acquire() -> None:
        if not semaphore.acquire(blocking=True).success:
            raise RuntimeError("py-redis-semaphore: blocking acquire failed")

    return acquire, lambda _: semaphore.release()


def redis_semaphore(url: str, name: str, limit: int):
    # PyPI Redis-Semaphore: a list of `limit` tokens taken by BLPOP (timeout
    # 0: forever); holders older than stale_client_timeout are given back.
    import redis
    from redis_semaphore import Semaphore

    semaphore = Semaphore(
        redis.StrictRedis.from_url(url),
        count=limit,
        namespace=name,
        stale_client_timeout=30,
    )

    def release(_) -> None:
        if not semaphore.release():
            raise RuntimeError("Redis-Semaphore: the slot was not held")

    return semaphore.acquire, release


def redis_semaphore_eval(url: str, name: str, limit: int):
    # PyPI redis-semaphore-eval: its semaphore() context manager tries, BLPOPs
    # the signal key once (whole seconds, at least 1) and tries again, then
    # gives up; here the same two steps repeat until a slot is taken.
    import redis
    from redis_semaphore_eval import acquire_lock, clear_lock

    client = redis.Redis.from_url(url)
    signal_key = f"signal_key:{name}"

    def acquire():
        while True:
            lock_id = acquire_lock(client, name, limit=limit, expire_in=30)
            if lock_id is not None:
                return lock_id
            client.blpop(signal_key, 1)

    def release(lock_id) -> None:
        clear_lock(client, name, lock_id)

    return acquire, release


def floor(url: str, name: str, limit: int):
    # Not a peer: the least a Redis semaphore can do. `limit` tokens in a
    # list; BLPOP takes one (the server hands a pushed token straight to the
    # longest-blocked waiter), LPUSH gives it back: one round trip each, no
    # TTL, so a crashed holder's token is lost for good.
    import redis

    client = redis.Redis.from_url(url)
    if client.set(f"{name}:filled", 1, nx=True):
        client.rpush(name, *range(limit))

    def acquire() -> bytes:
        return client.blpop([name], 0)[1]

    return acquire, lambda token: client.lpush(name, token)


IMPLEMENTATIONS = {
    "floor": floor,
    "lockyard": lockyard,
    "py-redis-semaphore": py_redis_semaphore,
    "Redis-Semaphore": redis_semaphore,
    "redis-semaphore-eval": redis_semaphore_eval,
}


class Counter:
    """A number in a file shared by every worker, changed under flock."""

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_RDWR)

    def add(self, delta: int) -> int:
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            value = int.from_bytes(os.pread(self.fd, 8, 0), "little", signed=True)
            value += delta
            os.pwrite(self.fd, value.to_bytes(8, "little", signed=True), 0)
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        return value


def main() -> None:
    if len(sys.argv) != 9 or sys.argv[1] not in IMPLEMENTATIONS:
        sys.exit(__doc__)
    implementation, url, name, limit, counter_file = sys.argv[1:6]
    hold_s, warmup_s, measure_s = map(float, sys.argv[6:])
    limit = int(limit)
    acquire, release = IMPLEMENTATIONS[implementation](url, name, limit)
    counter = Counter(counter_file)
    release(acquire())  # connect and load scripts before the clock starts
    print("ready", flush=True)

    start_ns = int(sys.stdin.readline())
    measure_from = start_ns + int(warmup_s * 1e9)
    stop_ns = measure_from + int(measure_s * 1e9)
    time.sleep(max(0, start_ns - time.monotonic_ns()) / 1e9)
    latencies, slept, highest, over_limit = [], [], 0, 0
    while (t0 := time.monotonic_ns()) < stop_ns:
        slot = acquire()
        t1 = time.monotonic_ns()
        holders = counter.add(1)
        highest = max(highest, holders)
        over_limit += holders > limit
        t2 = time.monotonic_ns()
        time.sleep(hold_s)
        t3 = time.monotonic_ns()
        counter.add(-1)
        release(slot)
        if measure_from <= t1 < stop_ns:
            latencies.append(t1 - t0)
            slept.append(t3 - t2)
    json.dump(
        {"latencies_ns": latencies, "slept_ns": slept, "highest": highest,
         "over_limit": over_limit},
        sys.stdout,
    )  # fmt: skip


if __name__ == "__main__":
    main()
