"""Many waiters on one lock in one Python process, for bench/run: what 1000
coroutines waiting cost (RSS, threads) with ``lockyard.asyncio``, and the
handoff between waiters in one process, async tasks against sync threads.

    python bench/asyncio_waiters.py [ROUNDS]

Starts its own redis-server (as bench.py does) and prints a table. The handoff is the time from a holder's release call to
the next waiter's acquire returning, p50 and p99 over every handoff of a
round of 200 waiters each taking the lock once; the sync row uses 50
threads (a thread per waiter is what the sync API costs).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time

from lockyard.asyncio.redis import Lock as AsyncLock
from lockyard.redis import Lock as SyncLock

from bench import RedisServer

WAITERS = 1000
HANDOFF_TASKS = 200
HANDOFF_THREADS = 50
RSS_TARGET_MIB = 8.0
HANDOFF_TARGET = 1.5


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


async def waiting_cost(url: str, name: str) -> tuple[float, int]:
    """RSS growth (MiB) and threads added while WAITERS tasks wait."""
    lock = AsyncLock(url, name)
    await lock.acquire()
    # One waiter first, so the runtime and its first connection count as
    # the baseline.
    warm = asyncio.create_task(lock.acquire())
    await asyncio.sleep(0.2)
    before, threads_before = rss_mib(), threads()
    waiters = [asyncio.create_task(lock.acquire()) for _ in range(WAITERS)]
    await asyncio.sleep(2.0)
    grown, threads_added = rss_mib() - before, threads() - threads_before
    for waiter in [warm, *waiters]:
        waiter.cancel()
    await asyncio.gather(warm, *waiters, return_exceptions=True)
    await lock.release()
    return grown, threads_added


async def async_handoffs(url: str, name: str) -> list[float]:
    lock = AsyncLock(url, name)
    releasing: list[int] = []
    gaps: list[float] = []

    async def waiter() -> None:
        await lock.acquire()
        if releasing:
            gaps.append((time.monotonic_ns() - releasing[-1]) / 1000)
        releasing.append(time.monotonic_ns())
        await lock.release()

    await lock.acquire()
    tasks = [asyncio.create_task(waiter()) for _ in range(HANDOFF_TASKS)]
    await asyncio.sleep(1.0)  # all queued
    await lock.release()
    await asyncio.gather(*tasks)
    return gaps


def sync_handoffs(url: str, name: str) -> list[float]:
    lock = SyncLock(url, name)
    releasing: list[int] = []
    gaps: list[float] = []
    guard = threading.Lock()

    def waiter() -> None:
        lock.acquire()
        with guard:
            if releasing:
                gaps.append((time.monotonic_ns() - releasing[-1]) / 1000)
            releasing.append(time.monotonic_ns())
        lock.release()

    lock.acquire()
    workers = [threading.Thread(target=waiter) for _ in range(HANDOFF_THREADS)]
    for worker in workers:
        worker.start()
    time.sleep(1.0)
    lock.release()
    for worker in workers:
        worker.join()
    return gaps


def percentile(samples: list[float], p: float) -> float:
    return statistics.quantiles(samples, n=100)[int(p) - 1]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory(prefix="lockyard-bench-") as directory:
        server = RedisServer(directory)
        try:
            measure(server.url, rounds)
        finally:
            server.stop()


def measure(url: str, rounds: int) -> None:
    grown, added = asyncio.run(waiting_cost(url, "bench-waiters"))
    print(f"{WAITERS} asyncio tasks waiting on one lock: RSS +{grown:.1f} MiB "
          f"(target ≤ {RSS_TARGET_MIB:g}: {'met' if grown <= RSS_TARGET_MIB else 'MISSED'}), "
          f"threads +{added} (a thread per waiter would be +{WAITERS})")  # fmt: skip
    print(f"handoff between waiters in one process, µs, {rounds} rounds "
          f"(× = async p50 / sync p50 of the same round, target ≤ {HANDOFF_TARGET})")  # fmt: skip
    for number in range(1, rounds + 1):
        sync = sync_handoffs(url, f"bench-sync-{number}")
        tasks = asyncio.run(async_handoffs(url, f"bench-async-{number}"))
        ratio = percentile(tasks, 50) / percentile(sync, 50)
        print(f"  round {number}: sync threads p50 {percentile(sync, 50):.0f} "
              f"p99 {percentile(sync, 99):.0f}; asyncio tasks p50 {percentile(tasks, 50):.0f} "
              f"p99 {percentile(tasks, 99):.0f}; × {ratio:.2f} "
              f"{'met' if ratio <= HANDOFF_TARGET else 'MISSED'}")  # fmt: skip


if __name__ == "__main__":
    main()
