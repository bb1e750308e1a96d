"""Uncontended acquire + release cycles from Python, for bench/run: prints
the mean microseconds per cycle.

    python bench/cycle.py floor|lockyard|redis-py|python-redis-lock URL KEY CYCLES
    python bench/cycle.py asyncio-floor|asyncio-lockyard|asyncio-redis-py URL KEY CYCLES

`floor` is the least any Redis lock can do: SET NX PX, then a
compare-and-delete script by EVALSHA, with redis-py. The `asyncio-` cycles
run in one task on asyncio's loop: `lockyard.asyncio.redis.Lock`, and
redis-py's asyncio client doing the floor's commands or its `Lock`.
"""

import asyncio
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


async def asyncio_floor(url: str, key: str):
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url)
    sha = await client.script_load(COMPARE_AND_DELETE)

    async def cycle() -> None:
        if not await client.set(key, "token", nx=True, px=30_000):
            raise RuntimeError("the key was taken")
        if await client.evalsha(sha, 1, key, "token") != 1:
            raise RuntimeError("the key was lost")

    return cycle


async def asyncio_lockyard(url: str, key: str):
    from lockyard.asyncio.redis import Lock

    lock = Lock(url, key, ttl=30.0)

    async def cycle() -> None:
        await lock.acquire()
        await lock.release()

    return cycle


async def asyncio_redis_py(url: str, key: str):
    import redis.asyncio

    lock = redis.asyncio.Redis.from_url(url).lock(key, timeout=30)

    async def cycle() -> None:
        await lock.acquire()
        await lock.release()

    return cycle


ASYNC_CYCLES = {
    "asyncio-floor": asyncio_floor,
    "asyncio-lockyard": asyncio_lockyard,
    "asyncio-redis-py": asyncio_redis_py,
}


async def measure_async(what: str, url: str, key: str, cycles: int) -> float:
    cycle = await ASYNC_CYCLES[what](url, key)
    for _ in range(min(cycles, 100)):  # connect, load scripts
        await cycle()
    started = time.perf_counter()
    for _ in range(cycles):
        await cycle()
    return (time.perf_counter() - started) * 1e6 / cycles


CYCLES = {
    "floor": floor,
    "lockyard": lockyard,
    "redis-py": redis_py,
    "python-redis-lock": python_redis_lock,
}


def main() -> None:
    if len(sys.argv) != 5 or sys.argv[1] not in {*CYCLES, *ASYNC_CYCLES}:
        sys.exit(__doc__)
    what, url, key, cycles = sys.argv[1:]
    if what in ASYNC_CYCLES:
        print(f"{asyncio.run(measure_async(what, url, key, int(cycles))):.1f}")
        return
    cycle = CYCLES[what](url, key)
    for _ in range(min(int(cycles), 100)):  # connect, load scripts
        cycle()
    started = time.perf_counter()
    for _ in range(int(cycles)):
        cycle()
    print(f"{(time.perf_counter() - started) * 1e6 / int(cycles):.1f}")


if __name__ == "__main__":
    main()
