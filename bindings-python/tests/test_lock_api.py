"""The shape of `lockyard.redis.Lock` and its context-manager semantics."""

from __future__ import annotations

import builtins
import threading

import lockyard
import pytest
from lockyard.redis import Lock


def test_package_exports_the_errors_and_a_version() -> None:
    assert isinstance(lockyard.__version__, str)
    for error in (
        lockyard.TimeoutError,
        lockyard.AlreadyLockedError,
        lockyard.NotLockedError,
        lockyard.LockUnhealthyError,
        lockyard.ConfigError,
        lockyard.BackendError,
    ):
        assert issubclass(error, lockyard.Error)
    assert issubclass(lockyard.Error, Exception)
    assert issubclass(lockyard.TimeoutError, builtins.TimeoutError)
    assert issubclass(lockyard.ConfigError, ValueError)


def test_lock_lives_in_lockyard_redis() -> None:
    assert Lock.__name__ == "Lock"
    assert Lock.__module__ == "lockyard.redis"
    assert Lock.__text_signature__ == (
        "(url, name, ttl=30.0, timeout=None, *, refresh_interval=None,"
        " max_refresh_fails=3, identity_prefix=None, connect_timeout=5.0,"
        " session=None, value=None)"
    )


def test_with_holds_the_lock_inside_and_releases_it_after(url: str, name: str) -> None:
    lock = Lock(url, name, ttl=5.0)
    with lock as entered:
        assert entered is lock
        assert lock.healthy
        assert lock.owned()
        assert lock.locked()
        assert isinstance(lock.fencing_token, int)
        lock.check_health()
    assert not lock.healthy
    assert lock.fencing_token is None
    assert not lock.owned()
    assert not lock.locked()


def test_with_releases_when_the_block_raises(url: str, name: str) -> None:
    lock = Lock(url, name)
    with pytest.raises(KeyError), lock:
        raise KeyError("boom")
    assert not lock.locked()


def test_with_releases_on_break(url: str, name: str) -> None:
    lock = Lock(url, name)
    for _ in range(3):
        with lock:
            break
    assert not lock.locked()


def test_with_releases_on_return(url: str, name: str) -> None:
    lock = Lock(url, name)

    def first_token() -> int | None:
        with lock:
            return lock.fencing_token

    assert first_token() is not None
    assert not lock.locked()


def test_acquire_and_release_like_threading_lock(url: str, name: str) -> None:
    lock = Lock(url, name)
    assert lock.acquire() is True
    assert lock.owned()
    lock.release()
    assert lock.try_acquire() is True
    lock.release()
    assert lock.acquire(blocking=False) is True
    lock.release()
    assert lock.acquire(timeout=0) is True
    lock.release()
    assert not lock.locked()


def test_each_thread_is_a_separate_holder(url: str, name: str) -> None:
    lock = Lock(url, name)
    seen: dict[str, object] = {}

    def other_thread() -> None:
        seen["try_acquire"] = lock.try_acquire()
        seen["owned"] = lock.owned()
        seen["identity"] = lock.identity
        seen["fencing_token"] = lock.fencing_token

    with lock:
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    assert seen["try_acquire"] is False
    assert seen["owned"] is False
    assert seen["fencing_token"] is None
    assert seen["identity"] != lock.identity


def test_a_second_acquire_on_the_same_thread_is_an_error(url: str, name: str) -> None:
    lock = Lock(url, name)
    with lock:
        with pytest.raises(lockyard.AlreadyLockedError, match=name):
            lock.acquire()
        assert lock.owned()


def test_releasing_what_this_thread_does_not_hold_is_an_error(
    url: str, name: str
) -> None:
    lock = Lock(url, name)
    with pytest.raises(lockyard.NotLockedError, match=name):
        lock.release()
    with pytest.raises(lockyard.NotLockedError):
        lock.check_health()


def test_with_times_out_with_the_constructor_timeout(url: str, name: str) -> None:
    holder = Lock(url, name)
    waiter = Lock(url, name, timeout=0.2)
    with holder, pytest.raises(lockyard.TimeoutError, match=name) as raised, waiter:
        pytest.fail("entered a held lock")
    assert isinstance(raised.value, builtins.TimeoutError)
    assert not waiter.owned()


def test_properties_and_repr(url: str, name: str) -> None:
    lock = Lock(url, name, identity_prefix="worker-3")
    assert lock.name == name
    assert lock.identity.startswith("worker-3-")
    assert name in repr(lock)
    assert "not held" in repr(lock)
    with lock:
        assert f"fencing_token={lock.fencing_token}" in repr(lock)


def test_a_dropped_lock_gives_back_its_hold(url: str, name: str) -> None:
    lock = Lock(url, name, ttl=30.0)
    lock.acquire()
    del lock  # or the process exits: the lease is not left to run out
    assert not Lock(url, name).locked()
