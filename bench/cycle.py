"""Uncontended acquire + release cycles from Python, for bench/run: prints
the mean microseconds per cycle.

    python bench/cycle.py floor|lockyard|redis-py|python-redis-lock URL KEY CYCLES

`floor` is the least any Redis lock can do: SET NX PX, then a
compare-and-delete script by EVALSHA, with redis-py.
"""

import sys
import time

COMPARE_AND_DELETE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] "
    "then return redis.call('del', KEYS[1]) else return 0 end"
)


def floor(url: str, key: str):
    import redis

    client = redis.Redis.from_url(url)
    sha = client.script_load(COMPARE_AND_DELETE)

    def cycle() -> None:
        if not client.set(key, "token", nx=True, px=30_000):
            raise RuntimeError("the key was taken")
        if client.evalsha(sha, 1, key, "token") != 1:
            raise RuntimeError("the key was lost")

    return cycle


def lockyard(url: str, key: str):
    from lockyard.redis import Lock

    lock = Lock(url, key, ttl=30.0)

    def cycle() -> None:
        lock.acquire()
        lock.release()

    return cycle


def redis_py(url: str, key: str):
    import redis

    lock = redis.Redis.from_url(url).lock(key, timeout=30)

    def cycle() -> None:
        lock.acquire()
        lock.release()

    return cycle


def python_redis_lock(url: str, key: str):
    import redis
    import redis_lock

    lock = redis_lock.Lock(redis.Redis.from_url(url), key, expire=30)

    def cycle() -> None:
        lock.acquire()
        lock.release()

    return cycle


CYCLES = {
    "floor": floor,
    "lockyard": lockyard,
    "redis-py": redis_py,
    "python-redis-lock": python_redis_lock,
}


def main() -> None:
    if len(sys.argv) != 5 or sys.argv[1] not in CYCLES:
        sys.exit(__doc__)
    what, url, key, cycles = sys.argv[1:]
    cycle = CYCLES[what](url, key)
    for _ in range(min(int(cycles), 100)):  # connect, load scripts
        cycle()
    started = time.perf_counter()
    for _ in range(int(cycles)):
        cycle()
    print(f"{(time.perf_counter() - started) * 1e6 / int(cycles):.1f}")


if __name__ == "__main__":
    main()
