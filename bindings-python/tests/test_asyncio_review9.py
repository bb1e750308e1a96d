"""Review 9 of lockyard.asyncio.gcs.Lock (commits 0562866 and 617d3ff)
against the faithful GCS test server: tests whose docstring starts with
FINDING reproduce problems found at 617d3ff and fail there; the others
are edges that held at 617d3ff, kept as coverage."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import urllib.error
import urllib.parse
from typing import Any

import pytest
from gcs_servers import GcsServer
from lockyard.asyncio.gcs import Lock
from lockyard.gcs import Lock as SyncLock

# A long ttl: an object left behind must not go stale during a test.
SLOW_TO_EXPIRE: dict[str, Any] = {"backoff_min": 0.02, "backoff_max": 0.1, "ttl": 60.0}


def exists(gcs: GcsServer, name: str) -> bool:
    """Whether the lock object is on the server (stale or not)."""
    path = "/storage/v1/b/locks/o/" + urllib.parse.quote(name, safe="")
    try:
        gcs.call("GET", path)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return False
        raise
    return True


def gone_within(gcs: GcsServer, name: str, seconds: float) -> bool:
    """Whether the object is gone, or goes within ``seconds``."""
    deadline = time.monotonic() + seconds
    while exists(gcs, name):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def test_two_waiting_tasks_of_a_thread_unsafe_lock_keep_one_object(
    gcs: GcsServer, name: str
) -> None:
    """FINDING: with ``thread_safe=False`` both tasks write the same
    identity. Two tasks waiting at once behind another holder: the first
    takes the object when it frees up; the second's next look takes that
    object for an abandoned hold of its own identity and deletes it, creates
    its own, finds the holder taken (AlreadyLockedError) and gives its own
    back. The first task holds the lock, healthy, with no object on the
    server: anyone else can take it."""

    async def main() -> None:
        someone = SyncLock(bucket_name="locks", path=name, **SLOW_TO_EXPIRE)
        assert someone.acquire(timeout=1)
        shared = Lock(
            bucket_name="locks", path=name, thread_safe=False, **SLOW_TO_EXPIRE
        )
        holding = asyncio.Event()
        done = asyncio.Event()
        outcomes: list[str] = []

        async def take() -> None:
            try:
                acquired = await shared.acquire(timeout=5)
            except Exception as error:  # noqa: BLE001 - recorded below
                outcomes.append(type(error).__name__)
                return
            outcomes.append("held" if acquired else "timed out")
            if acquired:
                holding.set()
                await done.wait()
                with contextlib.suppress(Exception):
                    await shared.release()

        tasks = [asyncio.ensure_future(take()) for _ in range(2)]
        await asyncio.sleep(0.3)  # both wait behind `someone`
        someone.release()  # on the thread that took it (a sync lock's holder)
        await asyncio.wait_for(holding.wait(), 5)
        # The second task's wait ends too (and gives back what it took).
        deadline = time.monotonic() + 5
        while len(outcomes) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        on_server = await asyncio.to_thread(exists, gcs, name)
        intruder = SyncLock(bucket_name="locks", path=name, **SLOW_TO_EXPIRE)

        def intrude() -> bool:
            if not intruder.acquire(timeout=0):
                return False
            intruder.release()
            return True

        intruded = await asyncio.to_thread(intrude)
        done.set()
        await asyncio.gather(*tasks)
        assert sorted(outcomes) in (["AlreadyLockedError", "held"], ["held"]), outcomes
        assert on_server, "a task holds the lock, but its object is gone"
        assert not intruded, "two holders: another lock took the object a task held"

    asyncio.run(main())


def test_a_task_cancelled_while_its_create_is_on_its_way_leaves_no_object(
    gcs: GcsServer, name: str
) -> None:
    """FINDING: the cancelled task's core future is dropped while its create
    is still on the server (slow to answer); the drop guard removes "what
    the create may have left" with one read right away, before the create
    lands, and finds nothing. The create lands a moment later: an object of
    nobody's, which blocks every other holder for its ttl (60 s here)."""
    gcs.inject("create", "slow:0.5")

    async def main() -> None:
        shared = Lock(bucket_name="locks", path=name, **SLOW_TO_EXPIRE)
        task = asyncio.ensure_future(shared.acquire())
        await asyncio.sleep(0.15)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert shared.fencing_token is None

    asyncio.run(main())
    time.sleep(0.6)  # the create has landed by now
    assert gone_within(gcs, name, 5.0), (
        "the cancelled acquire's object stays for its ttl"
    )


def test_a_sync_acquire_interrupted_while_its_create_is_on_its_way_leaves_no_object(
    gcs: GcsServer, name: str
) -> None:
    """FINDING: the blocking acquire now runs each step under
    ``block_on_interruptibly``, so a signal handler's exception (Ctrl-C)
    cuts the create in flight; the clean-up's one read comes before the
    create lands, and the object stays for its ttl. (Before 0562866 the
    request in flight ran to its reply.)"""

    class Alarm(Exception):
        pass

    def ring(signum: int, frame: object) -> None:
        raise Alarm

    gcs.inject("create", "slow:0.5")
    lock = SyncLock(bucket_name="locks", path=name, **SLOW_TO_EXPIRE)
    previous = signal.signal(signal.SIGALRM, ring)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.15)
        with pytest.raises(Alarm):
            lock.acquire(timeout=10)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not lock.owned_according_to_internal_state()
    time.sleep(0.6)  # the create has landed by now
    assert gone_within(gcs, name, 5.0), (
        "the interrupted acquire's object stays for its ttl"
    )


def test_a_task_cancelled_after_a_lost_create_reply_leaves_no_object(
    gcs: GcsServer, name: str
) -> None:
    """FINDING: the create lands but its reply is lost; its retry is on its
    way (the server slow to answer) when the task is cancelled. The drop
    guard reads the first create's object, sees this attempt's nonce and
    deletes it, and so makes room for the retry, which lands after it
    (ifGenerationMatch=0 now passes): an object of this cancelled attempt
    that nobody removes, blocking everyone for its ttl."""
    gcs.inject("create", "lose_reply")
    gcs.inject("create", "slow:1.0")

    async def main() -> None:
        shared = Lock(bucket_name="locks", path=name, **SLOW_TO_EXPIRE)
        task = asyncio.ensure_future(shared.acquire())
        await asyncio.sleep(0.4)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert shared.fencing_token is None

    asyncio.run(main())
    # The slow retry lands at about 1.1 s; the clean-up then has 5 s.
    time.sleep(1.0)
    assert gone_within(gcs, name, 5.0), "the cancelled acquire's retry left an object"


def test_a_task_cancelled_while_its_look_is_slow_takes_nothing(
    gcs: GcsServer, name: str
) -> None:
    """Holds at 617d3ff: a task waiting behind another holder, cancelled
    while its look (a slow read) is on its way, leaves the holder's object
    as it was, and the holder releases it normally."""

    async def main() -> None:
        someone = SyncLock(bucket_name="locks", path=name, **SLOW_TO_EXPIRE)
        assert someone.acquire(timeout=1)
        token = someone.fencing_token
        gcs.inject("get", "slow:0.5")
        shared = Lock(bucket_name="locks", path=name, **SLOW_TO_EXPIRE)
        task = asyncio.ensure_future(shared.acquire())
        await asyncio.sleep(0.2)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.6)
        assert someone.fencing_token == token and someone.healthy
        someone.release()
        assert not await shared.locked()

    asyncio.run(main())
