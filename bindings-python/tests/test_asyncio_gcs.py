"""lockyard.asyncio.gcs.Lock against the faithful GCS test server: tasks
are holders, a waiting task holds no thread and never blocks the loop,
cancellation leaves nothing held, and sync and async holders share one
object."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from typing import Any

import lockyard
import pytest
import uvloop
from gcs_servers import GcsServer
from lockyard.asyncio.gcs import Lock
from lockyard.gcs import Lock as SyncLock

FAST: dict[str, Any] = {"backoff_min": 0.02, "backoff_max": 0.1, "ttl": 5.0}


def lock(name: str, **options: Any) -> Lock:
    return Lock(bucket_name="locks", path=name, **FAST, **options)


def free(name: str) -> bool:
    """Whether the object is free: a sync lock takes it at once."""
    other = SyncLock(bucket_name="locks", path=name, **FAST)
    if not other.acquire(timeout=0):
        return False
    other.release()
    return True


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.parametrize("uv", [False, True], ids=["asyncio", "uvloop"])
def test_async_with_holds_and_releases(gcs: GcsServer, name: str, uv: bool) -> None:
    async def main() -> None:
        held = lock(name)
        assert not await held.locked() and held.name == name
        async with held:
            held.check_health()
            assert held.healthy and held.owned() and await held.locked()
            assert isinstance(held.fencing_token, int)
            assert not free(name)
        assert held.fencing_token is None and not await held.locked()

    if uv:
        uvloop.run(main())
    else:
        asyncio.run(main())


def test_tasks_exclude_each_other_and_waiters_hold_no_thread(
    gcs: GcsServer, name: str
) -> None:
    async def main() -> None:
        shared = lock(name)
        inside, overlaps, tokens = [0], [], []
        gaps: list[float] = []

        async def ticker() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        async def work() -> None:
            async with shared:
                inside[0] += 1
                overlaps.append(inside[0])
                tokens.append(shared.fencing_token)
                await asyncio.sleep(0.01)
                inside[0] -= 1

        ticking = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.05)
        before = os_threads()
        workers = [asyncio.ensure_future(work()) for _ in range(20)]
        await asyncio.sleep(0.3)
        waiting = os_threads()
        await asyncio.gather(*workers)
        ticking.cancel()
        assert overlaps == [1] * 20
        assert tokens == sorted(tokens) and len(set(tokens)) == 20
        # 19 waiting tasks cost at most a few of lockyard's pool threads
        # (one per look in flight), not one each.
        assert waiting - before < 8, (before, waiting)
        assert max(gaps) < 0.05, f"the loop stalled for {max(gaps):.3f} s"

    asyncio.run(main())
    assert free(name)


def test_errors_are_the_sync_locks(gcs: GcsServer, name: str) -> None:
    async def main() -> None:
        held = lock(name)
        with pytest.raises(lockyard.NotLockedError):
            await held.release()
        with pytest.raises(lockyard.NotLockedError):
            held.check_health()
        assert await held.acquire()
        with pytest.raises(lockyard.AlreadyLockedError):
            await held.acquire(timeout=0)

        async def other_task() -> None:
            assert not await held.try_acquire()
            assert not await held.acquire(timeout=0.2)
            with pytest.raises(lockyard.TimeoutError):
                async with lock(name, timeout=0.2):
                    pass
            with pytest.raises(TimeoutError):
                async with lock(name, timeout=0.1):
                    pass

        await asyncio.ensure_future(other_task())
        await held.release()
        with pytest.raises(lockyard.ConfigError):
            lock(name, max_refresh_fails=-1)
        with pytest.raises(lockyard.ConfigError):
            Lock(bucket_name="locks", path=name, ttl=-1.0)

    asyncio.run(main())
    assert free(name)


def test_a_task_cancelled_at_any_point_leaves_nothing_held(
    gcs: GcsServer, name: str
) -> None:
    async def main() -> None:
        shared = lock(name)

        async def take_and_give_back() -> None:
            if await shared.acquire():
                await shared.release()

        for delay in (0, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.03):
            task = asyncio.ensure_future(take_and_give_back())
            await asyncio.sleep(delay)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            # A look on its way when cancelled ends on its own, and what it
            # took is given back right after.
            deadline = time.monotonic() + 3.0
            while not await asyncio.to_thread(free, name):
                assert time.monotonic() < deadline, f"held after a cancel at {delay}"
                await asyncio.sleep(0.02)
        # Inside `async with`: released by the cancellation.
        entered = asyncio.Event()

        async def block() -> None:
            async with shared:
                entered.set()
                await asyncio.sleep(60)

        task = asyncio.ensure_future(block())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.to_thread(free, name)

    asyncio.run(main())


def test_sync_threads_and_async_tasks_exclude_each_other(
    gcs: GcsServer, name: str
) -> None:
    inside, overlaps = [0], []
    guard = threading.Lock()

    def enter() -> None:
        with guard:
            inside[0] += 1
            overlaps.append(inside[0])

    def leave() -> None:
        with guard:
            inside[0] -= 1

    def sync_worker() -> None:
        sync = SyncLock(bucket_name="locks", path=name, **FAST)
        for _ in range(4):
            with sync:
                enter()
                time.sleep(0.01)
                leave()

    async def main() -> None:
        shared = lock(name)

        async def work() -> None:
            for _ in range(4):
                async with shared:
                    enter()
                    await asyncio.sleep(0.01)
                    leave()

        thread = threading.Thread(target=sync_worker)
        thread.start()
        await asyncio.gather(work(), work())
        await asyncio.to_thread(thread.join)

    asyncio.run(main())
    assert overlaps == [1] * 12
    assert free(name)
