"""lockyard.asyncio.quorum.RwLock on three private redis-servers: tasks are
holders, writers exclude everyone, readers share, cancellation at any await
leaves nothing granted, and sync and async holders exclude each other."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import lockyard
import pytest
import uvloop
from lockyard.asyncio.quorum import RwLock
from lockyard.quorum import RwLock as SyncRwLock
from redis_server import Redis

KEPT = (":fence", ":alive", ":waiting", ":nodes")


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Redis]]:
    started = []
    try:
        for i in range(3):
            directory = tmp_path / f"node{i}"
            directory.mkdir()
            started.append(Redis(directory))
        yield started
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def urls(servers: list[Redis]) -> list[str]:
    return [server.url for server in servers]


def run(main: Coroutine[Any, Any, None], *, uv: bool = False) -> None:
    if uv:
        uvloop.run(main)
    else:
        asyncio.run(main)


def grants(servers: list[Redis]) -> list[str]:
    """Keys that are grants: all but the fencing counter, the restart guard,
    writer marks and the node list, which expire or stay by design."""
    found: list[str] = []
    for server in servers:
        found.extend(server.keys())
    return [key for key in found if not key.endswith(KEPT)]


async def until_no_grant(servers: list[Redis]) -> None:
    deadline = time.monotonic() + 3
    while grants(servers):
        assert time.monotonic() < deadline, grants(servers)
        await asyncio.sleep(0.01)


def test_the_class_lives_in_lockyard_asyncio_quorum(urls: list[str]) -> None:
    lock = RwLock(urls, "shape", ttl=5.0)
    assert lock.name == "shape"
    assert lock.nodes == urls
    assert "nodes=3" in repr(lock)
    with pytest.raises(lockyard.ConfigError):
        RwLock(urls[0], "one-str")  # type: ignore[arg-type]
    with pytest.raises(lockyard.ConfigError):
        RwLock([urls[0], urls[0]], "twice")


@pytest.mark.parametrize("uv", [False, True], ids=["asyncio", "uvloop"])
def test_tasks_take_turns_as_writers_and_share_as_readers(
    servers: list[Redis], urls: list[str], uv: bool
) -> None:
    async def main() -> None:
        lock = RwLock(urls, "turns", ttl=5.0, timeout=20.0)
        writing = reading = most_readers = 0

        async def writer() -> None:
            nonlocal writing
            for _ in range(3):
                async with lock.write():
                    lock.check_health()
                    writing += 1
                    assert writing == 1 and reading == 0, "a writer with company"
                    await asyncio.sleep(0.002)
                    writing -= 1

        async def reader() -> None:
            nonlocal reading, most_readers
            for _ in range(3):
                async with lock.read():
                    reading += 1
                    most_readers = max(most_readers, reading)
                    assert writing == 0, "a reader with a writer"
                    await asyncio.sleep(0.005)
                    reading -= 1

        await asyncio.gather(*[writer() for _ in range(3)], *[reader() for _ in range(6)])
        assert most_readers > 1, "readers never shared"
        await until_no_grant(servers)

    run(main(), uv=uv)


def test_a_task_is_one_holder_with_typed_errors_and_rising_tokens(urls: list[str]) -> None:
    async def main() -> None:
        lock = RwLock(urls, "holder", ttl=5.0)
        assert await lock.acquire_write()
        assert lock.owned() and lock.healthy
        first = await lock.fencing_token()
        assert isinstance(first, int) and first > 0
        assert await lock.fencing_token() == first
        with pytest.raises(lockyard.AlreadyLockedError):
            await lock.acquire_read(0)

        async def other() -> int | None:
            # Another task of this process is another holder.
            assert not await lock.acquire_write(0.2)
            assert await lock.acquire_write(10)
            token = await lock.fencing_token()
            await lock.release()
            return token

        waiting = asyncio.create_task(other())
        await asyncio.sleep(0.4)
        await lock.release()
        assert not lock.owned() and not lock.healthy
        second = await waiting
        assert second is not None and second > first
        with pytest.raises(lockyard.NotLockedError):
            await lock.release()
        with pytest.raises(lockyard.NotLockedError):
            lock.check_health()
        assert await lock.fencing_token() is None
        assert await lock.acquire_read(0)
        assert await lock.fencing_token() is None
        await lock.release()

    run(main())


def test_async_with_raises_timeout_error_and_an_error_in_the_block_releases(
    servers: list[Redis], urls: list[str]
) -> None:
    async def main() -> None:
        lock = RwLock(urls, "block", ttl=5.0, timeout=0.3)
        other = RwLock(urls, "block", ttl=5.0, timeout=0.3)
        with pytest.raises(ValueError):
            async with lock.write() as entered:
                assert entered is lock
                raise ValueError("in the block")
        assert not lock.owned()
        async with lock.read():
            started = time.monotonic()
            with pytest.raises(lockyard.TimeoutError) as raised:
                async with other.write():
                    pytest.fail("a writer got in beside a reader")
            assert isinstance(raised.value, TimeoutError)
            assert time.monotonic() - started >= 0.25
        await until_no_grant(servers)

    run(main())


@pytest.mark.parametrize("uv", [False, True], ids=["asyncio", "uvloop"])
def test_cancelling_waiters_and_holders_leaves_nothing_granted(
    servers: list[Redis], urls: list[str], uv: bool
) -> None:
    async def main() -> None:
        lock = RwLock(urls, "cancel", ttl=5.0)
        # Cut at every await of an uncontended entry, or inside the block.

        async def hold() -> None:
            async with lock.write():
                await asyncio.sleep(10)

        for delay in (0, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.05):
            task = asyncio.create_task(hold())
            await asyncio.sleep(delay)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # A cut entry's grants are given back without its task waiting.
            assert await lock.acquire_write(1), f"still held after a cut at {delay}"
            await lock.release()
        await until_no_grant(servers)
        # Writers waiting behind a reader, cancelled: their marks go with
        # them, or new readers would wait for the marks to lapse.
        reader = RwLock(urls, "cancel", ttl=5.0)
        assert await reader.acquire_read()
        waiters = [asyncio.create_task(lock.acquire_write()) for _ in range(20)]
        await asyncio.sleep(0.3)
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        second = RwLock(urls, "cancel", ttl=5.0)
        started = time.monotonic()
        assert await second.acquire_read(5)
        assert time.monotonic() - started < 0.4, "a reader waited for gone writers"
        await second.release()
        await reader.release()
        await until_no_grant(servers)
        assert await lock.acquire_write(0)
        await lock.release()

    run(main(), uv=uv)


def in_one_thread() -> concurrent.futures.ThreadPoolExecutor:
    """A thread of its own for a sync holder, which must release on the
    thread that acquired."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1)


def test_a_waiting_task_holds_no_thread_and_the_loop_keeps_ticking(urls: list[str]) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        holder, thread = SyncRwLock(urls, "ticks", ttl=5.0), in_one_thread()
        assert await loop.run_in_executor(thread, holder.acquire_write)
        lock = RwLock(urls, "ticks", ttl=5.0)
        threads = threading.active_count()

        async def read() -> bool:
            if not await lock.acquire_read(10):
                return False
            await lock.release()
            return True

        waiters = [asyncio.create_task(read()) for _ in range(50)]
        gaps, last = [], time.monotonic()
        for _ in range(60):
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now
        assert threading.active_count() <= threads + 1, "a thread per waiter"
        assert max(gaps) < 0.05, f"the loop stalled {max(gaps):.3f} s"
        await loop.run_in_executor(thread, holder.release)
        assert all(await asyncio.gather(*waiters))
        thread.shutdown()

    run(main())


def test_sync_and_async_holders_exclude_each_other(urls: list[str]) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        sync, thread = SyncRwLock(urls, "mixed", ttl=5.0), in_one_thread()
        lock = RwLock(urls, "mixed", ttl=5.0)
        assert await lock.acquire_write()
        assert not await loop.run_in_executor(thread, sync.acquire_read, 0.2)
        taken = loop.run_in_executor(thread, sync.acquire_read, 10)
        await asyncio.sleep(0.2)
        await lock.release()
        assert await taken
        assert not await lock.acquire_write(0.2)
        await loop.run_in_executor(thread, sync.release)
        assert await lock.acquire_write(5)
        await lock.release()
        thread.shutdown()

    run(main())
