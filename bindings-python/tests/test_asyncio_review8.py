"""Review 8 of lockyard.asyncio.redis's Session, Election, Observer and
exclusive (commit 7057a77), against a real redis-server. Tests whose
docstring starts with "FINDING:" fail at 7057a77; the others are coverage
of edges that held there."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import lockyard
import pytest
import uvloop
from lockyard.asyncio.redis import Election, Session
from lockyard.redis import Election as SyncElection
from lockyard.redis import Session as SyncSession
from redis_server import Redis


def session_keys(redis: Redis) -> list[str]:
    keys = redis.keys()
    return [key for key in keys if key.startswith("lockyard:session:")]


def queued(redis: Redis, name: str) -> int:
    count = redis.command("ZCARD", f"lockyard:{{{name}}}:queue")
    assert isinstance(count, int)
    return count


async def drain(observer: object, limit: float = 5.0) -> list[object]:
    terms = []
    deadline = time.monotonic() + limit
    async for term in observer:  # type: ignore[attr-defined]
        terms.append(term)
        assert time.monotonic() < deadline, "the observer never ended"
    return terms


def test_a_cancelled_observer_next_loses_no_term(redis: Redis) -> None:
    """FINDING: a term the core read for ``Observer.__anext__`` is dropped
    when the awaiting task is cancelled after the read finished but before
    the loop handed it over (the bridge's ``abandon`` is ``drop``): the next
    ``__anext__`` goes on after it, so that term is never seen."""

    async def main() -> None:
        async with Session(redis.url, lock_delay=0.0) as ours:
            observer = Election(redis.url, "leader", ours).observe(timeout=1.0)
            assert (await observer.__anext__()).value is None
            waiting = asyncio.ensure_future(observer.__anext__())
            await asyncio.sleep(0.2)  # now blocked in its XREAD
            with SyncSession(redis.url, lock_delay=0.0) as theirs:
                sync_election = SyncElection(redis.url, "leader", theirs)
                assert sync_election.campaign("sync", timeout=0)
                # The loop is busy: the read finishes and its outcome waits
                # in the loop's inbox while the task is cancelled.
                time.sleep(0.5)  # noqa: ASYNC251 (blocking on purpose)
                waiting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiting
                assert waiting.cancelled(), "the read had not finished: no test"
                sync_election.resign()
            values = [term.value for term in await drain(observer)]  # type: ignore[attr-defined]
        assert values == ["sync", None], "the cancelled next lost a term"

    asyncio.run(main())


def test_destroy_after_a_cancelled_create_leaves_no_live_session(redis: Redis) -> None:
    """FINDING: ``destroy()`` returns at once (``_native`` is None) while a
    create whose awaiting task was cancelled still runs; that create then
    finishes and its session key is kept alive by the renewer for as long
    as the object lives, although the caller destroyed the session."""

    async def main() -> None:
        session = Session(redis.url, ttl=1.0)
        creating = asyncio.ensure_future(session.create())
        await asyncio.sleep(0)  # the create is on its way
        creating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await creating
        await session.destroy()
        # Past two ttls: only a renewed key could still be there.
        await asyncio.sleep(2.5)
        assert session_keys(redis) == [], "a destroyed session is kept alive"
        assert not session.healthy

    asyncio.run(main())


ASYNC_PARENT = """
    import asyncio, json, os, sys
    import lockyard
    from lockyard.asyncio.redis import Election, Lock, Session

    url, name = sys.argv[1:3]

    async def setup():
        session = await Session(url, ttl=5.0)
        election = Election(url, f"{name}-election", session=session)
        assert await election.campaign("parent", timeout=0)
        lock = Lock(url, f"{name}-lock", session=session)
        assert await lock.acquire(timeout=0)
        return session, election, lock

    async def child():
        # The child's own loop: it resigns and destroys what it inherited,
        # which ends only its own part.
        try:
            await election.resign()
        except lockyard.NotLockedError:
            pass
        await session.destroy()
        assert not election.is_leader

    session, election, lock = asyncio.run(setup())
    pid = os.fork()
    if pid == 0:
        asyncio.run(child())
        sys.exit(0)  # the interpreter's own exit: finalizers included
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"child": os.waitstatus_to_exitcode(status)}), flush=True)
    sys.stdin.readline()

    async def report():
        print(json.dumps({
            "session": session.healthy,
            "leader": election.is_leader,
            "lock": await lock.locked(),
        }), flush=True)
        await election.resign()
        await session.destroy()

    asyncio.run(report())
"""


def test_a_forked_child_leaves_the_async_parents_holds_alone(
    redis: Redis, name: str, spawn: object
) -> None:
    """Holds at 7057a77: a child forked from a process whose session was
    created by awaiting, which leads an async election and holds an async
    lock under it, resigns and destroys them on a loop of its own and exits
    normally: the parent keeps all three. (A fork inside a running loop is
    left out: asyncio itself breaks the parent's loop then.)"""
    parent = spawn(ASYNC_PARENT, redis.url, name)  # type: ignore[operator]
    line = parent.stdout.readline()
    assert line, parent.communicate()[1]
    assert json.loads(line) == {"child": 0}, parent.stderr.read()
    assert len(session_keys(redis)) == 1
    assert not lockyard.redis.Lock(redis.url, f"{name}-lock").acquire(timeout=0)
    with SyncSession(redis.url) as rivals:
        rival = SyncElection(redis.url, f"{name}-election", rivals)
        assert rival.leader() == "parent"
        assert not rival.campaign("rival", timeout=0)
    parent.stdin.write("report\n")
    parent.stdin.flush()
    report = json.loads(parent.stdout.readline())
    assert report == {"session": True, "leader": True, "lock": True}
    _, err = parent.communicate(timeout=30)
    assert parent.returncode == 0, err
    assert "lockyard" not in err, err
    assert session_keys(redis) == []


@pytest.mark.parametrize("uv", [False, True], ids=["asyncio", "uvloop"])
def test_one_session_awaited_by_many_tasks_some_cancelled_is_created_once(
    redis: Redis, uv: bool
) -> None:
    """Holds at 7057a77: tasks awaiting one ``Session`` at once, some of
    them cancelled midway, share one created session; destroying it
    leaves no key."""

    async def main() -> None:
        session = Session(redis.url, ttl=5.0, lock_delay=0.0)
        waiting = [asyncio.ensure_future(session.create()) for _ in range(8)]
        await asyncio.sleep(0)
        for task in waiting[::2]:
            task.cancel()
        done = await asyncio.gather(*waiting, return_exceptions=True)
        created = [r for r in done if not isinstance(r, BaseException)]
        assert created and all(r is session for r in created)
        assert all(isinstance(r, asyncio.CancelledError) for r in done[::2])
        assert session.healthy and len(session_keys(redis)) == 1
        assert await session is session and len(session_keys(redis)) == 1
        await session.destroy()
        assert session_keys(redis) == []

    if uv:
        uvloop.run(main())
    else:
        asyncio.run(main())


@pytest.mark.parametrize("uv", [False, True], ids=["asyncio", "uvloop"])
def test_two_tasks_campaigning_on_one_election_cut_as_they_win(
    redis: Redis, uv: bool
) -> None:
    """Holds at 7057a77: two tasks campaign on one ``Election`` while a
    rival resigns, and are cancelled around the moment one wins: never two
    leaders, never a term nobody reports, nothing left in line."""

    async def main() -> None:
        async with Session(redis.url, lock_delay=0.0) as ours:
            election = Election(redis.url, "leader", ours)
            with SyncSession(redis.url, lock_delay=0.0) as theirs:
                rival = SyncElection(redis.url, "leader", theirs)
                for round_ in range(30):
                    assert rival.campaign("rival", timeout=1.0)
                    tasks = [
                        asyncio.ensure_future(election.campaign(v, timeout=2.0))
                        for v in ("x", "y")
                    ]
                    await asyncio.sleep(0.02)
                    await asyncio.to_thread(rival.resign)
                    await asyncio.sleep(round_ / 10_000)
                    for task in tasks:
                        task.cancel()
                    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
                    won = [o for o in outcomes if o is True]
                    assert len(won) <= 1, outcomes
                    if won:
                        assert election.is_leader
                        await election.resign()
                    deadline = time.monotonic() + 2.0
                    while (
                        election.is_leader
                        or await election.leader() is not None
                        or queued(redis, "leader")
                    ):
                        assert time.monotonic() < deadline, (
                            "a cancelled campaign left a leader or a waiter"
                        )
                        await asyncio.sleep(0.01)

    if uv:
        uvloop.run(main())
    else:
        asyncio.run(main())
