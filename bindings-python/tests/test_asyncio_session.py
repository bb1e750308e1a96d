"""lockyard.asyncio.redis's Session, Election and exclusive against a real
redis-server: sessions created and destroyed by awaiting, campaigns that
hold no thread and leave nothing behind when cancelled, observers read with
``async for``, and sync and async workers sharing names."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import lockyard
import pytest
import uvloop
from lockyard.asyncio.redis import Election, Lock, Session, exclusive
from lockyard.redis import Election as SyncElection
from lockyard.redis import Session as SyncSession
from lockyard.redis import exclusive as sync_exclusive
from redis_server import Redis


def session_keys(redis: Redis) -> list[str]:
    keys = redis.keys()
    return [key for key in keys if key.startswith("lockyard:session:")]


def queued(redis: Redis, name: str) -> int:
    count = redis.command("ZCARD", f"lockyard:{{{name}}}:queue")
    assert isinstance(count, int)
    return count


def eventually(what: str, condition: object, limit: float = 2.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_session_is_created_and_destroyed_by_awaiting(redis: Redis) -> None:
    async def main() -> None:
        session = Session(redis.url, ttl=2.0, lock_delay=0.0)
        assert not session.healthy
        with pytest.raises(lockyard.ConfigError, match="not created"):
            session.check_health()
        with pytest.raises(lockyard.ConfigError, match="not created"):
            Lock(redis.url, "job", session=session)
        assert await session is session
        assert await session is session  # once: still one session
        assert session.healthy and session.ttl == 2.0 and session.lock_delay == 0.0
        assert session.behavior == "release" and len(session_keys(redis)) == 1
        lock = Lock(redis.url, "job", session=session, value="worker-3")
        assert await lock.acquire(timeout=1.0)
        assert lockyard.redis.holder(redis.url, "job") == "worker-3"
        await session.destroy()
        assert not session.healthy
        with pytest.raises(lockyard.LockUnhealthyError):
            lock.check_health()
        assert session_keys(redis) == []
        # Freed at once, not left to the session's ttl.
        other = lockyard.redis.Lock(redis.url, "job")
        assert other.acquire(timeout=0)
        other.release()
        await session.destroy()  # idempotent

    asyncio.run(main())


def test_async_with_destroys_the_session_however_the_block_ends(redis: Redis) -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match="boom"):
            async with Session(redis.url) as session:
                lock = Lock(redis.url, "job", session=session)
                await lock.acquire()
                raise RuntimeError("boom")
        assert not session.healthy and session_keys(redis) == []
        assert not await lock.locked()

    asyncio.run(main())


def test_bad_options_raise_when_the_session_is_created(redis: Redis) -> None:
    async def main() -> None:
        with pytest.raises(lockyard.ConfigError):
            await Session(redis.url, ttl=0.001)
        with pytest.raises(lockyard.ConfigError):
            await Session(redis.url, behavior="keep")
        with pytest.raises(lockyard.ConfigError):
            await Session(redis.url, ttl="long")  # type: ignore[arg-type]
        with pytest.raises(lockyard.BackendError):
            await Session("redis://127.0.0.1:1/0", connect_timeout=0.3)
        # A failed create can be retried: it is not remembered.
        session = Session("redis://127.0.0.1:1/0", connect_timeout=0.2)
        for _ in range(2):
            with pytest.raises(lockyard.BackendError):
                await session
        assert session_keys(redis) == []

    asyncio.run(main())


def test_a_cancelled_create_leaves_no_session_behind(redis: Redis) -> None:
    async def main() -> None:
        sessions = [Session(redis.url, ttl=60.0) for _ in range(40)]
        for delay, session in enumerate(sessions):
            creating = asyncio.ensure_future(session.create())
            await asyncio.sleep(delay / 20_000)
            creating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await creating
        created = [s for s in sessions if s.healthy]
        for session in created:
            await session.destroy()
        sessions.clear()

    asyncio.run(main())
    # Creates that finished after their awaiting task was cancelled are
    # destroyed with the object that kept them.
    eventually("no session key left", lambda: session_keys(redis) == [])


@pytest.mark.parametrize("uv", [False, True], ids=["asyncio", "uvloop"])
def test_campaigns_take_turns_with_sync_campaigners_and_are_observed(
    redis: Redis, uv: bool
) -> None:
    async def main() -> None:
        async with Session(redis.url, ttl=2.0, lock_delay=0.0) as ours:
            with SyncSession(redis.url, ttl=2.0, lock_delay=0.0) as theirs:
                sync_election = SyncElection(redis.url, "leader", theirs)
                election = Election(redis.url, "leader", ours)
                observer = Election(redis.url, "leader", ours).observe(timeout=0.7)
                first = await observer.__anext__()
                assert first.value is None
                assert sync_election.campaign("sync", timeout=0)
                assert not await election.campaign("async", timeout=0.2)
                assert await election.leader() == "sync"
                # A campaign waits on the loop while the sync leader resigns
                # from another thread.
                resigning = threading.Timer(0.2, sync_election.resign)
                resigning.start()
                assert await election.campaign("async", timeout=3.0)
                resigning.join()
                assert election.is_leader and election.fencing_token is not None
                election.check_health()
                with pytest.raises(lockyard.AlreadyLockedError):
                    await election.campaign("async", timeout=0)
                await election.resign()
                with pytest.raises(lockyard.NotLockedError):
                    await election.resign()
                with pytest.raises(lockyard.NotLockedError):
                    election.check_health()
                terms = [term async for term in observer]
        values = [term.value for term in terms]
        assert values == ["sync", None, "async", None]
        tokens = [term.fencing_token for term in terms]
        assert tokens[0] == tokens[1] < tokens[2] == tokens[3]
        assert queued(redis, "leader") == 0

    if uv:
        uvloop.run(main())
    else:
        asyncio.run(main())


def test_a_cancelled_campaign_leaves_no_place_and_takes_no_term(redis: Redis) -> None:
    async def main() -> None:
        async with Session(redis.url, lock_delay=0.0) as a_session, Session(
            redis.url, lock_delay=0.0
        ) as b_session:
            a = Election(redis.url, "leader", a_session)
            b = Election(redis.url, "leader", b_session)
            assert await a.campaign("a")
            for _ in range(20):
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(b.campaign("b"), 0.03)
            deadline = time.monotonic() + 1.0
            while queued(redis, "leader"):
                assert time.monotonic() < deadline, "a cancelled campaign stayed in line"
                await asyncio.sleep(0.01)
            await a.resign()
            await asyncio.sleep(0.1)
            assert await a.leader() is None and not b.is_leader
            assert await b.campaign("b", timeout=0)

    asyncio.run(main())


def test_async_and_sync_workers_never_run_one_task_at_once(redis: Redis) -> None:
    tasks = [f"task-{n}" for n in range(30)]
    ran: list[str] = []
    inside: set[str] = set()
    guard = threading.Lock()

    def enter(task: str) -> None:
        with guard:
            assert task not in inside, f"{task} ran twice at once"
            inside.add(task)
            ran.append(task)

    def leave(task: str) -> None:
        with guard:
            inside.discard(task)

    def sync_worker(go: threading.Event) -> None:
        with SyncSession(redis.url, lock_delay=0.0) as session:
            go.wait()
            for task in sync_exclusive(redis.url, tasks, session=session):
                enter(task)
                time.sleep(0.003)
                leave(task)

    async def main() -> None:
        go = threading.Event()
        thread = threading.Thread(target=sync_worker, args=(go,))
        thread.start()
        async with Session(redis.url, lock_delay=0.0) as session:
            go.set()

            async def worker() -> None:
                async for task in exclusive(redis.url, tasks, session=session):
                    session.check_health()
                    enter(task)
                    await asyncio.sleep(0.003)
                    leave(task)

            await asyncio.gather(worker(), worker())
        await asyncio.to_thread(thread.join)

    asyncio.run(main())
    assert set(ran) == set(tasks)
    keys = redis.keys()
    assert [k for k in keys if ":holders" in k or ":queue" in k] == []


def test_breaking_out_of_exclusive_releases_the_task(redis: Redis) -> None:
    async def main() -> None:
        async with Session(redis.url, lock_delay=0.0) as session:
            async with contextlib.aclosing(
                exclusive(redis.url, ["a", "b"], session=session)
            ) as walk:
                async for task in walk:
                    assert task == "a"
                    break
            # Released at once: another worker takes it.
            assert lockyard.redis.Lock(redis.url, "a").acquire(timeout=0)
            with pytest.raises(RuntimeError):
                async for task in exclusive(redis.url, ["b"], session=session):
                    raise RuntimeError(task)
            # Left to the loop, which closes the generator from a task of
            # its own: released all the same.
            other = lockyard.redis.Lock(redis.url, "b")
            deadline = time.monotonic() + 1.0
            while not other.acquire(timeout=0):
                assert time.monotonic() < deadline, "b stayed held"
                await asyncio.sleep(0.01)

    asyncio.run(main())


def test_a_create_ended_by_destroy_is_a_config_error_for_its_awaiter(
    redis: Redis,
) -> None:
    async def main() -> None:
        session = Session(redis.url, ttl=60.0)
        creating = asyncio.ensure_future(session.create())
        await asyncio.sleep(0)
        await session.destroy()
        # Not a CancelledError, as if the awaiting task had been cancelled:
        # a ConfigError, or (had the create won the race) the session,
        # destroyed.
        with contextlib.suppress(lockyard.ConfigError):
            await creating
        with pytest.raises(lockyard.ConfigError, match="destroyed"):
            await session
        assert not session.healthy

    asyncio.run(main())
    eventually("no session key left", lambda: session_keys(redis) == [])
