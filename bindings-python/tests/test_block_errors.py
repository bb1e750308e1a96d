"""A block that raises keeps its own exception when giving back what it held
fails too (here: the server went away inside the block). The failure is
logged on the ``lockyard`` logger and attached as a note; after a block
that did not raise, it still raises."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager

import lockyard
import pytest
from gcs_servers import start_fake_gcs
from lockyard.gcs import Lock as GcsLock
from lockyard.quorum import RwLock
from lockyard.redis import Lock, Session, WaitGroup, exclusive
from redis_server import Redis

Front = Callable[[str, str], AbstractContextManager[object]]

# Every `with` front whose release reports a server it cannot reach as an
# error. (A quorum lock reports grants it could not give back as lost, with
# a warning, so its block's exception never had a rival.)
FRONTS: dict[str, Front] = {
    "lock": lambda url, name: Lock(url, name),
    "slot": lambda url, name: WaitGroup(url, name, limit=2).slot(),
    "session": lambda url, name: Session(url),
}


@pytest.mark.parametrize("front", FRONTS)
def test_the_blocks_exception_wins_over_a_failing_release(
    redis: Redis, name: str, front: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ValueError) as raised, FRONTS[front](redis.url, name):
        redis.stop()
        raise ValueError("the block's own")

    assert str(raised.value) == "the block's own"
    logged = [r.getMessage() for r in caplog.records if r.name == "lockyard"]
    assert any("failed too" in m and "BackendError" in m for m in logged), logged
    if sys.version_info >= (3, 11):
        notes = raised.value.__notes__
        assert len(notes) == 1 and "BackendError" in notes[0], notes


@pytest.mark.parametrize("front", FRONTS)
def test_a_failing_release_after_a_block_that_succeeded_raises(
    redis: Redis, name: str, front: str
) -> None:
    with pytest.raises(lockyard.BackendError), FRONTS[front](redis.url, name):
        redis.stop()


@pytest.mark.parametrize("mode", ["write", "read"])
def test_a_quorum_blocks_exception_reaches_the_caller(
    redis: Redis, name: str, mode: str
) -> None:
    lock = RwLock([redis.url], name)
    with pytest.raises(RuntimeError, match="the block's own"), getattr(lock, mode)():
        redis.stop()
        raise RuntimeError("the block's own")


def test_an_exclusive_tasks_exception_wins_over_a_failing_release(
    redis: Redis, name: str
) -> None:
    session = Session(redis.url)
    with pytest.raises(RuntimeError, match="the block's own"):
        for _task in exclusive(redis.url, [name], session=session):
            redis.stop()
            raise RuntimeError("the block's own")


def test_breaking_out_of_exclusive_raises_a_failing_release(
    redis: Redis, name: str
) -> None:
    # A break is an orderly exit, not a failing block: closing the loop
    # must report that the task's lock could not be given back.
    session = Session(redis.url, lock_delay=0.0)
    tasks = exclusive(redis.url, [name], session=session)
    for _task in tasks:
        redis.stop()
        break
    with pytest.raises(lockyard.BackendError):
        tasks.close()


def test_a_gcs_blocks_exception_wins_over_a_failing_release(
    name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gcs = start_fake_gcs()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.host)
    lock = GcsLock(bucket_name="locks", path=name, ttl=5.0)
    with pytest.raises(ValueError, match="the block's own") as raised, lock:
        gcs.stop()
        raise ValueError("the block's own")

    logged = [r.getMessage() for r in caplog.records if r.name == "lockyard"]
    assert any("failed too" in m and "BackendError" in m for m in logged), logged
    if sys.version_info >= (3, 11):
        assert "BackendError" in raised.value.__notes__[0]
