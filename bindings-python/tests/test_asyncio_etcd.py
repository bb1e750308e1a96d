"""lockyard.asyncio.etcd against a real etcd member: tasks are holders,
served in arrival order; waiting coroutines hold no thread and never block
the loop; cancellation at any await leaves no key in etcd; sync and async
holders (and processes) share one line; a killed async holder's lease runs
out."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import lockyard
import pytest
import uvloop
from etcd_server import Etcd
from lockyard.asyncio.etcd import Lock, WaitGroup
from lockyard.etcd import Lock as SyncLock

Spawn = Callable[..., "subprocess.Popen[str]"]


def run(main: Coroutine[Any, Any, None], *, uv: bool = False) -> None:
    if uv:
        uvloop.run(main)
    else:
        asyncio.run(main)


async def keys(etcd: Etcd) -> list[str]:
    """etcd's keys, read off the loop (etcdctl is a process)."""
    return await asyncio.to_thread(etcd.keys)


async def until_keys(etcd: Etcd, count: int, limit: float = 15.0) -> None:
    """Waits until etcd holds exactly `count` of lockyard's keys: a
    cancelled wait's key is deleted in the background, which on a loaded
    machine has taken a little over 5 s."""
    deadline = time.monotonic() + limit
    while len(left := await keys(etcd)) != count:
        assert time.monotonic() < deadline, f"{left} instead of {count} keys"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("uv", [False, True], ids=["asyncio", "uvloop"])
def test_async_with_holds_fences_and_releases(etcd: Etcd, name: str, uv: bool) -> None:
    async def main() -> None:
        lock = Lock(etcd.url, name, ttl=5.0)
        assert lock.name == name and not await lock.locked()
        async with lock:
            lock.check_health()
            assert lock.healthy and lock.owned() and await lock.locked()
            first = lock.fencing_token
            assert isinstance(first, int)
            assert not SyncLock(etcd.url, name).acquire(timeout=0)
        assert lock.fencing_token is None and not await lock.locked()
        assert await lock.acquire(timeout=1)
        assert lock.fencing_token is not None and lock.fencing_token > first
        await lock.release()
        assert await keys(etcd) == []

    run(main(), uv=uv)


@pytest.mark.parametrize("uv", [False, True], ids=["asyncio", "uvloop"])
def test_fifty_tasks_take_turns_in_arrival_order(etcd: Etcd, name: str, uv: bool) -> None:
    async def main() -> None:
        lock = Lock(etcd.url, name)
        inside, order = 0, []

        async def worker(number: int) -> None:
            nonlocal inside
            async with lock:
                inside += 1
                assert inside == 1, "two holders"
                order.append(number)
                await asyncio.sleep(0)
                inside -= 1

        await lock.acquire()
        workers = []
        for number in range(50):
            workers.append(asyncio.create_task(worker(number)))
            await until_keys(etcd, number + 2)
        await lock.release()
        await asyncio.gather(*workers)
        assert order == list(range(50)), "not in arrival order"
        assert await keys(etcd) == []

    run(main(), uv=uv)


def test_waiting_tasks_hold_no_thread_and_never_block_the_loop(
    etcd: Etcd, name: str
) -> None:
    async def main() -> None:
        lock = Lock(etcd.url, name)
        await lock.acquire()
        threads = len(os.listdir("/proc/self/task"))
        waiters = [asyncio.create_task(lock.acquire()) for _ in range(100)]
        longest, last, started = 0.0, time.monotonic(), time.monotonic()
        while time.monotonic() - started < 1.5:
            await asyncio.sleep(0.01)
            longest = max(longest, time.monotonic() - last)
            last = time.monotonic()
        assert longest < 0.05, f"the loop was blocked for {longest * 1000:.0f} ms"
        assert len(os.listdir("/proc/self/task")) <= threads + 2, "a thread per waiter"
        await until_keys(etcd, 101)
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        await until_keys(etcd, 1)
        await lock.release()
        assert await keys(etcd) == []

    run(main())


@pytest.mark.parametrize("uv", [False, True], ids=["asyncio", "uvloop"])
def test_a_task_cancelled_at_any_await_leaves_no_key(
    etcd: Etcd, name: str, uv: bool
) -> None:
    async def main() -> None:
        holder, waiter = Lock(etcd.url, name), Lock(etcd.url, name)
        for round_ in range(30):
            await holder.acquire()
            waiting = asyncio.create_task(waiter.acquire())
            # Release and cancel at shifting moments: before the put is
            # sent, while it waits in line, as it is handed the lock.
            await asyncio.sleep(round_ % 15 * 0.001)
            if round_ < 15:
                waiting.cancel()
                await holder.release()
            else:
                await holder.release()
                await asyncio.sleep((29 - round_) * 0.0005)
                waiting.cancel()
            try:
                await waiting
            except asyncio.CancelledError:
                pass
            else:
                # It won before its cancel arrived: the hold is its task's.
                waiter._native.leave_in_background(_key_of(waiting))
            await until_keys(etcd, 0)
            assert await holder.try_acquire(), f"round {round_}: the lock stayed taken"
            await holder.release()

    run(main(), uv=uv)


def _key_of(task: asyncio.Task[Any]) -> int:
    from lockyard.asyncio._bridge import _keys

    return _keys[task]


def test_cancelling_a_task_inside_async_with_releases(etcd: Etcd, name: str) -> None:
    async def main() -> None:
        lock = Lock(etcd.url, name)
        entered = asyncio.Event()

        async def holder() -> None:
            async with lock:
                entered.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(holder())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not await lock.locked()
        assert await lock.try_acquire()
        await lock.release()
        assert await keys(etcd) == []

    run(main())


def test_timeouts_tasks_and_errors(etcd: Etcd, name: str) -> None:
    async def main() -> None:
        lock = Lock(etcd.url, name, timeout=0.3)
        async with lock:
            with pytest.raises(lockyard.AlreadyLockedError):
                await lock.acquire()

            async def other() -> bool:
                assert not lock.owned() and lock.fencing_token is None
                with pytest.raises(lockyard.NotLockedError):
                    lock.check_health()
                with pytest.raises(lockyard.NotLockedError):
                    await lock.release()
                started = time.monotonic()
                with pytest.raises(TimeoutError) as raised:
                    async with lock:
                        pass
                assert isinstance(raised.value, lockyard.TimeoutError)
                assert 0.25 < time.monotonic() - started < 1.5
                return await lock.acquire(timeout=0.1)

            assert await asyncio.create_task(other()) is False
        with pytest.raises(lockyard.ConfigError):
            Lock(etcd.url, "", ttl=1.0)
        with pytest.raises(lockyard.ConfigError):
            Lock("redis://127.0.0.1:6379", name)
        with pytest.raises(lockyard.ConfigError):
            await lock.acquire(timeout=-1)
        assert await keys(etcd) == []

    run(main())


def test_a_wait_group_never_goes_over_its_limit(etcd: Etcd, name: str) -> None:
    async def main() -> None:
        group = WaitGroup(etcd.url, name, limit=3)
        assert repr(group).startswith("<lockyard.asyncio.etcd.WaitGroup")
        inside = most = 0

        async def worker() -> None:
            nonlocal inside, most
            for _ in range(2):
                async with group.slot() as slot:
                    inside += 1
                    most = max(most, inside)
                    slot.check_health()
                    assert slot.healthy and slot.fencing_token
                    await asyncio.sleep(0.005)
                    inside -= 1

        await asyncio.gather(*(worker() for _ in range(10)))
        assert most == 3
        assert await group.count() == 0

        token = await group.add()
        assert await group.count() == 1 and group.healthy(token)
        assert not await group.wait(timeout=0.1)
        assert await group.done(token) and not await group.done(token)
        assert await group.wait(timeout=1.0)
        with pytest.raises(lockyard.TimeoutError):
            await asyncio.gather(*(group.add(timeout=0.3) for _ in range(4)))
        assert await group.count() == 3, "the three taken slots stay taken"

    run(main())


def test_a_slot_wait_cancelled_leaves_no_key(etcd: Etcd, name: str) -> None:
    async def main() -> None:
        group = WaitGroup(etcd.url, name, limit=1)
        held = await group.add()
        for round_ in range(10):
            waiting = asyncio.create_task(group.add())
            await asyncio.sleep(round_ * 0.003)
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
        await until_keys(etcd, 1)
        assert await group.done(held)
        assert await group.wait(timeout=1.0)
        assert await keys(etcd) == []

    run(main())


def test_a_slot_token_is_adopted_in_another_process(
    etcd: Etcd, name: str, spawn: Spawn
) -> None:
    async def add() -> str:
        return await WaitGroup(etcd.url, name, limit=1, ttl=1.0).add()

    token = asyncio.run(add())
    worker = spawn(
        """
        import asyncio, sys
        from lockyard.asyncio.etcd import WaitGroup
        async def main():
            group = WaitGroup(sys.argv[1], sys.argv[2], limit=1, ttl=1.0)
            print(await group.adopt(sys.argv[3]), flush=True)
            await asyncio.sleep(2.5)  # beyond the adder's ttl: kept alive here
            print(await group.count(), await group.done(sys.argv[3]), flush=True)
        asyncio.run(main())
        """,
        etcd.url,
        name,
        token,
    )
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "True"
    assert worker.stdout.readline().split() == ["1", "True"]
    assert worker.wait(timeout=10) == 0


def test_a_killed_async_holder_is_recovered_after_its_ttl(
    etcd: Etcd, name: str, spawn: Spawn
) -> None:
    child = spawn(
        """
        import asyncio, sys
        from lockyard.asyncio.etcd import Lock
        async def main():
            lock = Lock(sys.argv[1], sys.argv[2], ttl=1.0)
            await lock.acquire()
            print("held", flush=True)
            await asyncio.sleep(60)
        asyncio.run(main())
        """,
        etcd.url,
        name,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "held"
    child.send_signal(signal.SIGKILL)
    child.wait()
    killed = time.monotonic()

    async def main() -> None:
        lock = Lock(etcd.url, name)
        assert await lock.acquire(timeout=10)
        waited = time.monotonic() - killed
        # etcd's lease of 1 s runs out within its minimum ttl and a check.
        assert waited < 8, f"recovered after {waited:.2f} s"
        await lock.release()

    run(main())


def test_sync_and_async_processes_share_one_line_in_arrival_order(
    etcd: Etcd, name: str, spawn: Spawn, tmp_path: Path
) -> None:
    served = tmp_path / "served"
    sync_lock = SyncLock(etcd.url, name)
    sync_lock.acquire()
    children = []
    for number, kind in enumerate(["async", "sync", "async", "sync"]):
        if kind == "async":
            code = """
            import asyncio, sys
            from lockyard.asyncio.etcd import Lock
            async def main():
                lock = Lock(sys.argv[1], sys.argv[2])
                print("asking", flush=True)
                async with lock:
                    with open(sys.argv[3], "a") as served:
                        served.write(sys.argv[4] + "\\n")
                    await asyncio.sleep(0.1)
            asyncio.run(main())
            """
        else:
            code = """
            import sys, time
            from lockyard.etcd import Lock
            lock = Lock(sys.argv[1], sys.argv[2])
            print("asking", flush=True)
            with lock:
                with open(sys.argv[3], "a") as served:
                    served.write(sys.argv[4] + "\\n")
                time.sleep(0.1)
            """
        child = spawn(code, etcd.url, name, str(served), str(number))
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "asking"
        deadline = time.monotonic() + 10
        while len(etcd.keys()) < number + 2:
            assert time.monotonic() < deadline, "the child never queued"
            time.sleep(0.02)
        children.append(child)
    sync_lock.release()
    for child in children:
        assert child.wait(timeout=20) == 0
    assert served.read_text().split() == ["0", "1", "2", "3"], "not in arrival order"
    assert etcd.keys() == []
