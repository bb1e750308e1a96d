"""Review of lockyard.asyncio.redis: each test reproduces one finding."""

from __future__ import annotations

import asyncio
import gc
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import lockyard
from lockyard.asyncio.redis import Lock, WaitGroup
from redis_server import Redis

Spawn = Callable[..., "subprocess.Popen[str]"]


def eventually(check: Callable[[], bool], within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_one_slot_entered_by_two_tasks_leaks_no_slot(redis: Redis, name: str) -> None:
    async def main() -> None:
        group = WaitGroup(redis.url, name, limit=5)
        slot = group.slot()

        async def use() -> None:
            async with slot:
                await asyncio.sleep(0.05)

        results = await asyncio.gather(use(), use(), return_exceptions=True)
        assert await group.count() == 0, f"a slot stayed taken: {results}"
        assert results[0] is None
        assert isinstance(results[1], lockyard.ConfigError), results

    asyncio.run(main())


def test_a_loop_closed_with_a_grant_in_its_inbox_gives_it_back(
    redis: Redis, name: str
) -> None:
    from lockyard.redis import Lock as SyncLock

    blocker = SyncLock(redis.url, name)
    blocker.acquire()
    lock = Lock(redis.url, name)
    loop = asyncio.new_event_loop()
    task = loop.create_task(lock.acquire())
    loop.run_until_complete(asyncio.sleep(0.3))  # the acquire waits in line
    assert not task.done()
    blocker.release()  # hands the lock to the waiting acquire...
    time.sleep(0.3)  # ...whose grant lands in an inbox nobody reads again
    task._log_destroy_pending = False  # type: ignore[attr-defined]
    loop.close()
    del task, loop
    gc.collect()

    async def locked() -> bool:
        return await lock.locked()

    assert eventually(lambda: not asyncio.run(locked())), (
        "held by a task of a closed loop"
    )


class _FlakyLoop(asyncio.SelectorEventLoop):
    """A loop whose call_soon raises once, as a signal handler's exception
    may in the middle of a future's set_result."""

    fail = False

    def call_soon(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail:
            self.fail = False
            raise RuntimeError("a signal handler's exception")
        return super().call_soon(*args, **kwargs)


def test_an_error_in_the_middle_of_drain_strands_no_other_future(
    redis: Redis, name: str
) -> None:
    locks = [Lock(redis.url, f"{name}-{i}") for i in range(3)]
    loop = _FlakyLoop()

    async def main() -> None:
        tasks = [asyncio.create_task(lock.acquire()) for lock in locks]
        await asyncio.sleep(0)
        # Blocks on purpose: all three are granted before one drain settles them.
        time.sleep(0.3)  # noqa: ASYNC251
        loop.fail = True
        _, pending = await asyncio.wait(tasks, timeout=3)
        # The one whose set_result raised never wakes (asyncio's own doing:
        # its result is set, its wake-up was never scheduled); the others
        # must not be stranded with it.
        assert len(pending) <= 1, f"{len(pending)} acquires never settled"
        for task in pending:
            task._log_destroy_pending = False  # type: ignore[attr-defined]

    try:
        loop.set_exception_handler(lambda loop, context: None)
        loop.run_until_complete(main())
    finally:
        loop.close()


def test_ctrl_c_while_tasks_wait_leaves_nobody_in_line(
    redis: Redis, name: str, spawn: Spawn
) -> None:
    from lockyard.redis import Lock as SyncLock

    blocker = SyncLock(redis.url, name)
    for run in range(3):
        assert blocker.try_acquire()
        child = spawn(
            """
            import asyncio, sys
            from lockyard.asyncio.redis import Lock
            async def main():
                lock = Lock(sys.argv[1], sys.argv[2])
                async def one():
                    async with lock:
                        pass
                tasks = [asyncio.create_task(one()) for _ in range(20)]
                await asyncio.sleep(0.5)
                print("waiting", flush=True)
                await asyncio.gather(*tasks)
            asyncio.run(main())
            """,
            redis.url,
            name,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "waiting"
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=15) == -signal.SIGINT
        queue = redis.command("ZCARD", f"lockyard:{{{name}}}:queue")
        assert queue == 0, f"run {run}: {queue} cancelled waiters left in line"
        blocker.release()
        # Free at once, not after the 2 s handoff window of a waiter gone.
        after = SyncLock(redis.url, name)
        assert after.try_acquire(), f"run {run}"
        after.release()


def test_exiting_while_a_daemon_threads_loop_waits_leaves_nobody_in_line(
    redis: Redis, name: str, spawn: Spawn
) -> None:
    from lockyard.redis import Lock as SyncLock

    blocker = SyncLock(redis.url, name)
    for run in range(3):
        assert blocker.try_acquire()
        child = spawn(
            """
            import asyncio, sys, threading, time
            from lockyard.asyncio.redis import Lock
            lock = Lock(sys.argv[1], sys.argv[2])
            def run():
                async def main():
                    await lock.acquire()
                asyncio.run(main())
            threading.Thread(target=run, daemon=True).start()
            time.sleep(0.5)
            """,
            redis.url,
            name,
        )
        _, err = child.communicate(timeout=30)
        assert child.returncode == 0, f"run {run}: {err}"
        queue = redis.command("ZCARD", f"lockyard:{{{name}}}:queue")
        assert queue == 0, f"run {run}: the exited waiter stayed in line"
        blocker.release()
        after = SyncLock(redis.url, name)
        assert after.try_acquire(), f"run {run}: handed to a waiter gone"
        after.release()
