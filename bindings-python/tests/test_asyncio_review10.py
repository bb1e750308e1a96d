"""Review 10 of lockyard.asyncio.gcs.Lock (commit 49e60bb) against the
faithful GCS test server: tests whose docstring starts with FINDING
reproduce problems found at 49e60bb and fail there; the others are edges
that held at 49e60bb, kept as coverage."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.parse
from typing import Any

from gcs_servers import GcsServer
from lockyard.asyncio.gcs import Lock

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


def hold_up_the_loop(seconds: float) -> None:
    """Blocks the calling thread (the running loop's, on purpose)."""
    time.sleep(seconds)


def test_a_task_cancelled_as_its_acquire_completes_can_acquire_again_at_once(
    gcs: GcsServer, name: str
) -> None:
    """FINDING: a task cancelled after its acquire completed on lockyard's
    runtime but before the loop read that outcome from its inbox is told
    CancelledError, while its hold is still in the lock's holds: the
    outcome is given back only when the loop next drains its inbox
    (``settle_one`` sees the future cancelled and abandons it). The same
    task acquiring again at once, as a task that catches the cancellation
    and retries does, is refused with AlreadyLockedError although it holds
    nothing it knows of. Here the loop is held up for 0.5 s right after
    the task's step, so that the new acquire reaches the core before the
    loop drains its inbox (on a busy loop this happens by itself). A fix:
    when ``settle`` is cancelled and its core future has already finished,
    give its outcome back (``undo``) at once, before re-raising, instead of
    leaving that to the next drain."""

    async def main() -> None:
        lock = Lock(bucket_name="locks", path=name, **SLOW_TO_EXPIRE)
        outcomes: list[object] = []

        async def take() -> None:
            try:
                await lock.acquire(timeout=5)
            except asyncio.CancelledError:
                try:
                    outcomes.append(await lock.acquire(timeout=5))
                except Exception as error:  # noqa: BLE001 - recorded below
                    outcomes.append(type(error).__name__)
                    return
                await lock.release()

        task = asyncio.create_task(take())
        await asyncio.sleep(0)  # the task's acquire is on its way
        # The loop is held up: the acquire completes on lockyard's runtime
        # and its outcome waits, unread, in the loop's inbox.
        hold_up_the_loop(1.0)
        task.cancel()
        # Runs after the task's step, before the loop drains its inbox.
        asyncio.get_running_loop().call_soon(hold_up_the_loop, 0.5)
        await task
        assert outcomes == [True], outcomes

    asyncio.run(main())
    deadline = time.monotonic() + 5
    while exists(gcs, name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not exists(gcs, name)
