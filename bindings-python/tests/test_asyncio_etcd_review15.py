"""Review 15: failing tests for lockyard.asyncio.etcd's Session, Election
and Observer (6c3f747)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from etcd_server import Etcd
from lockyard.asyncio.etcd import Election, Session


async def cancelled_as_answered(read: Callable[[], Any]) -> asyncio.Task[Any]:
    """Runs ``read()`` in a task that is cancelled in the very loop
    iteration its native future gets its answer (as ``asyncio.wait_for``'s
    timeout or a TaskGroup's cancellation can land): the answer is in, the
    task has not resumed yet."""
    loop = asyncio.get_running_loop()
    original = loop.create_future
    reader: asyncio.Task[Any] | None = None

    def create_future() -> asyncio.Future[Any]:
        future = original()
        future.add_done_callback(lambda _: reader.cancel())  # type: ignore[union-attr]
        return future

    loop.create_future = create_future  # type: ignore[method-assign]
    try:
        reader = asyncio.ensure_future(read())
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    finally:
        loop.create_future = original  # type: ignore[method-assign]
    return reader


def test_an_observer_cancelled_as_its_change_arrives_loses_no_change(
    etcd: Etcd, name: str
) -> None:
    """BUG: ``Observer.__anext__`` awaits ``settle(self._native.next)``
    without an ``undo``: a task cancelled after the native future got its
    term but before the task resumed drops the term (``settle`` only calls
    ``undo`` for that case; the native ``unread`` runs only when the
    asyncio future itself was cancelled first). The Observer's docstring
    says "Cancelled while it waits, it loses no change"; here the current
    state, node-a's term, is never reported (the same holds for the Redis
    Observer, which shares the class)."""

    async def main() -> None:
        session = await Session(etcd.url, ttl=5.0, lock_delay=0.0)
        election = Election(etcd.url, name, session=session)
        assert await election.campaign("node-a", timeout=5.0)
        token = election.fencing_token
        observer = election.observe(timeout=2.0)
        reader = await cancelled_as_answered(observer.__anext__)
        assert reader.cancelled()
        try:
            again = await observer.__anext__()
        except StopAsyncIteration:
            again = None
        await election.resign()
        await session.destroy()
        assert again is not None, "the change read for the cancelled task was lost"
        assert (again.value, again.fencing_token) == ("node-a", token)

    asyncio.run(main())


def test_a_redis_observer_cancelled_as_its_change_arrives_loses_no_change(
    redis: Any, name: str
) -> None:
    """The same bug through lockyard.asyncio.redis (its Observer is the
    shared class; the Redis one had the same ``settle`` call before the
    refactor, so this is not a regression of 6c3f747)."""
    from lockyard.asyncio.redis import Election as RedisElection
    from lockyard.asyncio.redis import Session as RedisSession

    async def main() -> None:
        session = await RedisSession(redis.url, ttl=5.0, lock_delay=0.0)
        election = RedisElection(redis.url, name, session=session)
        assert await election.campaign("node-a", timeout=5.0)
        token = election.fencing_token
        observer = election.observe(timeout=2.0)
        reader = await cancelled_as_answered(observer.__anext__)
        assert reader.cancelled()
        try:
            again = await observer.__anext__()
        except StopAsyncIteration:
            again = None
        await election.resign()
        await session.destroy()
        assert again is not None, "the change read for the cancelled task was lost"
        assert (again.value, again.fencing_token) == ("node-a", token)

    asyncio.run(main())


def test_control_a_campaign_cancelled_as_it_wins_is_given_back(
    etcd: Etcd, name: str
) -> None:
    """Control (passes): the same cancellation of a campaign, whose
    ``settle`` has an ``undo``: the won term is resigned, not kept."""

    async def main() -> None:
        session = await Session(etcd.url, ttl=5.0, lock_delay=0.0)
        election = Election(etcd.url, name, session=session)
        reader = await cancelled_as_answered(lambda: election.campaign("node-a", 5.0))
        assert reader.cancelled()
        for _ in range(100):
            if not await asyncio.to_thread(etcd.keys):
                break
            await asyncio.sleep(0.05)
        assert not election.is_leader
        assert await asyncio.to_thread(etcd.keys) == []
        assert await election.leader() is None
        await session.destroy()

    asyncio.run(main())


def test_a_create_ended_by_destroy_as_its_answer_arrives_leaves_no_lease(
    etcd: Etcd,
) -> None:
    """BUG: ``TaskSession._new`` awaits ``settle(create)`` without an
    ``undo``. When ``destroy()`` cancels the create under way in the loop
    iteration the native answer (the granted session) arrives, ``settle``
    drops the session it was handed (no undo) and ``destroy()`` sees a
    cancelled create and destroys nothing. The native session lives on in
    the cancelled task's traceback, its keep-alive running: the lease
    outlives its ttl (3 s here) for as long as the Session object lives,
    though ``destroy()`` returned ("A create still under way ... gives up,
    or is destroyed once done")."""

    def leases() -> list[str]:
        out = etcd.ctl("lease", "list").stdout
        return [line for line in out.splitlines()[1:] if line.strip()]

    async def main() -> None:
        session = Session(etcd.url, ttl=3.0, lock_delay=0.0)
        loop = asyncio.get_running_loop()
        original = loop.create_future

        def create_future() -> asyncio.Future[Any]:
            future = original()
            # destroy()'s first step, in the iteration the answer arrives.
            future.add_done_callback(lambda _: session._creating.cancel())  # type: ignore[union-attr]
            return future

        loop.create_future = create_future  # type: ignore[method-assign]
        try:
            creating = asyncio.ensure_future(session.create())
            with contextlib.suppress(BaseException):
                await creating
        finally:
            loop.create_future = original  # type: ignore[method-assign]
        await session.destroy()
        assert not session.healthy
        await asyncio.sleep(5.0)  # past the ttl: only a kept-alive lease is left
        left = await asyncio.to_thread(leases)
        assert left == [], f"destroy() returned, yet the lease is kept alive: {left}"

    asyncio.run(main())
