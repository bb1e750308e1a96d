"""lockyard.etcd.Session against a real etcd member: locks under a session,
destroy(), and the lock_delay of a session lost with its process."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import lockyard
import pytest
from etcd_server import Etcd
from lockyard.etcd import Lock, Session, holder


def test_a_lock_under_a_session_stores_its_value_and_destroy_frees_it(
    etcd: Etcd, name: str
) -> None:
    other = Lock(etcd.url, name, ttl=5.0)
    with Session(etcd.url, ttl=5.0, lock_delay=30.0) as session:
        assert session.healthy and session.behavior == "release"
        assert (session.ttl, session.lock_delay) == (5.0, 30.0)
        lock = Lock(etcd.url, name, session=session, value="worker-3")
        assert lock.acquire(timeout=5)
        lock.check_health()
        assert holder(etcd.url, name) == "worker-3"
        assert not other.try_acquire()
        assert repr(session).startswith("<lockyard.etcd.Session id=")
    # Leaving the block destroyed the session: no lock_delay follows.
    assert not session.healthy and not lock.healthy
    with pytest.raises(lockyard.LockUnhealthyError):
        session.check_health()
    started = time.monotonic()
    assert other.acquire(timeout=5)
    assert time.monotonic() - started < 1.0
    other.release()
    lock.release()  # lost with its session: logs a warning
    with pytest.raises(lockyard.ConfigError):
        lock.try_acquire()
    assert etcd.keys() == []


HOLD_UNDER_A_SESSION = """
    import sys
    from lockyard.etcd import Lock, Session

    session = Session(sys.argv[1], ttl=2.0, lock_delay=3.0)
    lock = Lock(sys.argv[1], sys.argv[2], session=session, value="nightly")
    lock.acquire()
    print(lock.fencing_token, flush=True)
    sys.stdin.readline()
"""


def test_a_killed_sessions_name_stays_barred_for_its_lock_delay(
    etcd: Etcd, name: str, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    child = spawn(HOLD_UNDER_A_SESSION, etcd.url, name)
    assert child.stdout is not None
    token = int(child.stdout.readline())
    child.kill()
    child.wait()
    killed_at = time.monotonic()
    lock = Lock(etcd.url, name, ttl=5.0)
    assert not lock.try_acquire()
    time.sleep(2.5)  # past the session's ttl: its key is gone, its bar is not
    assert holder(etcd.url, name) == "nightly"
    assert not lock.try_acquire(), "barred for lock_delay after the session's ttl"
    assert lock.acquire(timeout=10)
    waited = time.monotonic() - killed_at
    # The bar's lease (ttl + lock_delay = 5 s) runs from its last keep-alive,
    # at most ttl/3 before the kill.
    assert 4.0 < waited < 7.5, waited
    assert lock.fencing_token is not None and lock.fencing_token > token
    lock.release()
    assert etcd.keys() == []


def test_bad_session_options_raise_config_error(etcd: Etcd, name: str) -> None:
    for options in (
        {"ttl": 0.5},
        {"lock_delay": -1.0},
        {"behavior": "keep"},
        {"lock_delay": 1e19},
    ):
        with pytest.raises(lockyard.ConfigError):
            Session(etcd.url, **options)  # type: ignore[arg-type]
    with Session(etcd.url, ttl=5.0) as session:
        with pytest.raises(lockyard.ConfigError):
            Lock("etcd://127.0.0.1:1", name, session=session)
        with pytest.raises(TypeError):
            Lock(etcd.url, name, session=object())  # type: ignore[arg-type]
