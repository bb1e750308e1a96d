"""lockyard.asyncio.etcd's Session, Election and exclusive against a real
etcd member: sessions granted and revoked by awaiting, campaigns that
leave no key when cancelled, observers read with ``async for`` that lose
no change when cancelled, and sync and async workers sharing names."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import lockyard
import pytest
import uvloop
from etcd_server import Etcd
from lockyard.asyncio.etcd import Election, Lock, Session, exclusive
from lockyard.etcd import Election as SyncElection
from lockyard.etcd import Session as SyncSession
from lockyard.etcd import exclusive as sync_exclusive


def leases(etcd: Etcd) -> list[str]:
    out = etcd.ctl("lease", "list").stdout
    return [line for line in out.splitlines()[1:] if line.strip()]


async def until(what: str, condition: object, limit: float = 15.0) -> None:
    deadline = time.monotonic() + limit
    while not await asyncio.to_thread(condition):  # type: ignore[arg-type]
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


def test_a_session_is_created_and_destroyed_by_awaiting(etcd: Etcd) -> None:
    async def main() -> None:
        session = Session(etcd.url, ttl=5.0, lock_delay=0.0)
        assert not session.healthy
        with pytest.raises(lockyard.ConfigError, match="not created"):
            Lock(etcd.url, "job", session=session)
        assert await session is session
        assert await session is session  # once: still one session
        assert session.healthy and session.ttl == 5.0 and session.lock_delay == 0.0
        assert "lockyard.asyncio.etcd.Session id=" in repr(session)
        assert len(await asyncio.to_thread(leases, etcd)) == 1
        lock = Lock(etcd.url, "job", session=session, value="worker-3")
        assert await lock.acquire(timeout=1.0)
        assert lockyard.etcd.holder(etcd.url, "job") == "worker-3"
        await session.destroy()
        assert not session.healthy
        with pytest.raises(lockyard.LockUnhealthyError):
            lock.check_health()
        # Freed at once, not left to the session's ttl.
        assert await asyncio.to_thread(etcd.keys) == []
        assert await asyncio.to_thread(leases, etcd) == []
        await session.destroy()  # idempotent

    asyncio.run(main())


def test_bad_options_and_a_cancelled_create(etcd: Etcd) -> None:
    async def main() -> None:
        with pytest.raises(lockyard.ConfigError):
            await Session(etcd.url, ttl=0.001)
        with pytest.raises(lockyard.ConfigError):
            await Session("redis://127.0.0.1:6379", ttl=5.0)
        with pytest.raises(lockyard.BackendError):
            await Session("etcd://127.0.0.1:1", connect_timeout=0.2)
        sessions = [Session(etcd.url, ttl=60.0) for _ in range(20)]
        for delay, session in enumerate(sessions):
            creating = asyncio.ensure_future(session.create())
            await asyncio.sleep(delay / 2000)
            creating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await creating
        for session in sessions:
            await session.destroy()

    asyncio.run(main())
    # Revoked in the background: a loaded machine has taken over 5 s.
    deadline = time.monotonic() + 15
    while leases(etcd):
        assert time.monotonic() < deadline, f"leases left: {leases(etcd)}"
        time.sleep(0.05)


@pytest.mark.parametrize("uv", [False, True], ids=["asyncio", "uvloop"])
def test_campaigns_take_turns_with_sync_campaigners_and_are_observed(
    etcd: Etcd, uv: bool
) -> None:
    async def main() -> None:
        async with Session(etcd.url, ttl=5.0, lock_delay=0.0) as ours:
            with SyncSession(etcd.url, ttl=5.0, lock_delay=0.0) as theirs:
                sync_election = SyncElection(etcd.url, "leader", theirs)
                election = Election(etcd.url, "leader", ours)
                observer = Election(etcd.url, "leader", ours).observe(timeout=1.0)
                first = await observer.__anext__()
                assert first.value is None
                assert sync_election.campaign("sync", timeout=0)
                assert not await election.campaign("async", timeout=0.2)
                assert await election.leader() == "sync"
                # A campaign waits on the loop while the sync leader resigns
                # from another thread.
                resigning = threading.Timer(0.3, sync_election.resign)
                resigning.start()
                assert await election.campaign("async", timeout=5.0)
                resigning.join()
                assert election.is_leader and election.fencing_token is not None
                election.check_health()
                with pytest.raises(lockyard.AlreadyLockedError):
                    await election.campaign("async", timeout=0)
                await election.resign()
                with pytest.raises(lockyard.NotLockedError):
                    await election.resign()
                terms = [term async for term in observer]
        values = [term.value for term in terms]
        assert values == ["sync", None, "async", None]
        tokens = [term.fencing_token for term in terms]
        assert tokens[0] == tokens[1] < tokens[2] == tokens[3]
        assert etcd.keys() == []

    if uv:
        uvloop.run(main())
    else:
        asyncio.run(main())


def test_a_cancelled_campaign_leaves_no_key_and_takes_no_term(etcd: Etcd) -> None:
    async def main() -> None:
        async with Session(etcd.url, lock_delay=0.0) as a_session, Session(
            etcd.url, lock_delay=0.0
        ) as b_session:
            a = Election(etcd.url, "leader", a_session)
            b = Election(etcd.url, "leader", b_session)
            assert await a.campaign("a")
            for step in range(15):
                campaign = asyncio.ensure_future(b.campaign("b"))
                await asyncio.sleep(step * 0.003)
                campaign.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await campaign
            await until("a cancelled campaign stayed in line", lambda: len(etcd.keys()) == 1)
            await a.resign()
            await asyncio.sleep(0.1)
            assert await a.leader() is None and not b.is_leader
            assert await b.campaign("b", timeout=0)

    asyncio.run(main())


def test_an_observer_cancelled_as_changes_come_loses_none(etcd: Etcd) -> None:
    async def main() -> None:
        async with Session(etcd.url, lock_delay=0.0) as session:
            election = Election(etcd.url, "handovers", session)
            observer = election.observe(timeout=1.0)
            seen = [await observer.__anext__()]
            tokens = []
            for round_ in range(8):
                assert await election.campaign("leader", timeout=5.0)
                tokens.append(election.fencing_token)
                await election.resign()
                reading = asyncio.ensure_future(observer.__anext__())
                await asyncio.sleep(round_ * 0.002)
                reading.cancel()
                try:
                    seen.append(await reading)
                except asyncio.CancelledError:
                    pass
            seen.extend([term async for term in observer])
        expected = [(None, 0)]
        for token in tokens:
            expected += [("leader", token), (None, token)]
        assert [(term.value, term.fencing_token) for term in seen] == expected

    asyncio.run(main())


def test_async_and_sync_workers_never_run_one_task_at_once(etcd: Etcd) -> None:
    tasks = [f"task-{n}" for n in range(20)]
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
        with SyncSession(etcd.url, lock_delay=0.0) as session:
            go.wait()
            for task in sync_exclusive(etcd.url, tasks, session=session):
                enter(task)
                time.sleep(0.005)
                leave(task)

    async def main() -> None:
        go = threading.Event()
        thread = threading.Thread(target=sync_worker, args=(go,))
        thread.start()
        async with Session(etcd.url, lock_delay=0.0) as session:
            go.set()

            async def worker() -> None:
                async for task in exclusive(etcd.url, tasks, session=session):
                    session.check_health()
                    enter(task)
                    await asyncio.sleep(0.005)
                    leave(task)

            await asyncio.gather(worker(), worker())
        await asyncio.to_thread(thread.join)

    asyncio.run(main())
    assert set(ran) == set(tasks)
    assert etcd.keys() == []


def test_breaking_out_of_exclusive_releases_the_task(etcd: Etcd) -> None:
    async def main() -> None:
        async with Session(etcd.url, lock_delay=0.0) as session:
            async with contextlib.aclosing(
                exclusive(etcd.url, ["a", "b"], session=session)
            ) as walk:
                async for task in walk:
                    assert task == "a"
                    break
            # Released at once: another worker takes it.
            def take_and_give_back() -> bool:
                other = lockyard.etcd.Lock(etcd.url, "a")
                if not other.acquire(timeout=0):
                    return False
                other.release()
                return True

            assert await asyncio.to_thread(take_and_give_back)

    asyncio.run(main())
