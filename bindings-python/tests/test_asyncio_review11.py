"""Review 11 of lockyard.asyncio.gcs.Lock (commit 5cc02cd, at a54015b)
against the faithful GCS test server: tests whose docstring starts with
FINDING reproduce problems found at a54015b and fail there."""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.error
import urllib.parse
from typing import Any

import lockyard
from gcs_servers import GcsServer
from lockyard.asyncio.gcs import Lock

# A long ttl: an object left behind must not go stale during a test. The
# request timeout (0.3 s) cuts off a slow create while it is on its way.
SLOW_TO_EXPIRE: dict[str, Any] = {
    "backoff_min": 0.02,
    "backoff_max": 0.1,
    "ttl": 60.0,
    "cloud_storage_options": {"timeout": 0.3},
}


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


def test_a_cancelled_tasks_first_create_try_lands_after_its_retry_met_another_holder(
    gcs: GcsServer, name: str
) -> None:
    """FINDING: another task holds the lock. Our task's first create is
    held by the server for 1.5 s; the request timeout (0.3 s) cuts it off
    and the retry meets the holder's object (412), which clears
    ``create_unanswered``, and the read after it clears ``create_in_doubt``
    (core/src/gcs/acquire.rs: both describe only the create's last try).
    The task is cancelled (0.7 s): the stopped wait has nothing to clean
    up. The holder releases; the first try then lands: an object of the
    cancelled task's identity, held and refreshed by nobody, that blocks
    everyone for its ttl (60 s here)."""

    async def main() -> None:
        holder = Lock(bucket_name="locks", path=name, **SLOW_TO_EXPIRE)
        waiter = Lock(bucket_name="locks", path=name, **SLOW_TO_EXPIRE)
        held = asyncio.Event()
        done = asyncio.Event()

        async def hold() -> None:
            assert await holder.acquire(timeout=5)
            held.set()
            await done.wait()
            await holder.release()

        holding = asyncio.create_task(hold())
        await held.wait()
        gcs.inject("create", "slow:1.5")
        waiting = asyncio.create_task(waiter.acquire(timeout=30))
        await asyncio.sleep(0.7)
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        done.set()
        await holding

    asyncio.run(main())
    assert not exists(gcs, name), "released, and the first try has not landed yet"
    time.sleep(1.2)  # the first try has landed by now
    assert gone_within(gcs, name, 5.0), (
        "the cancelled acquire's first create try landed after it stopped; "
        "the object stays for its ttl"
    )


def test_a_timed_out_acquires_first_create_try_lands_after_the_holder_left(
    gcs: GcsServer, name: str
) -> None:
    """FINDING: the same with an acquire that times out (``timeout=0.8``):
    the wait ends with Ok(None) and cleans nothing up."""

    async def main() -> None:
        holder = Lock(bucket_name="locks", path=name, **SLOW_TO_EXPIRE)
        waiter = Lock(bucket_name="locks", path=name, **SLOW_TO_EXPIRE)
        assert await holder.acquire(timeout=5)
        gcs.inject("create", "slow:1.5")
        with contextlib.suppress(lockyard.TimeoutError):
            assert not await waiter.acquire(timeout=0.8)
        await holder.release()

    asyncio.run(main())
    assert not exists(gcs, name), "released, and the first try has not landed yet"
    time.sleep(1.2)
    assert gone_within(gcs, name, 5.0), (
        "the timed-out acquire's first create try landed after it gave up; "
        "the object stays for its ttl"
    )
