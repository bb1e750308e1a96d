"""lockyard.gcs.Lock against fake-gcs-server: API shape, the gem's rules,
errors, threads."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import lockyard
import pytest
from gcs_servers import GcsServer
from lockyard.gcs import Lock

FAST: dict[str, Any] = {"backoff_min": 0.02, "backoff_max": 0.1}


@pytest.fixture(autouse=True)
def emulator(fake_gcs: GcsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.host)


def test_with_block_holds_and_releases(name: str) -> None:
    lock = Lock(bucket_name="locks", path=name, ttl=5.0, **FAST)
    assert not lock.locked()
    with lock:
        lock.check_health()
        assert lock.healthy and lock.owned() and lock.locked()
        assert isinstance(lock.fencing_token, int)
    assert lock.fencing_token is None and not lock.locked()


def test_the_gems_rules_for_lock_and_unlock(name: str) -> None:
    lock = Lock(bucket_name="locks", path=name, ttl=5.0, **FAST)
    with pytest.raises(lockyard.NotLockedError):
        lock.release()
    with pytest.raises(lockyard.NotLockedError):
        lock.check_health()
    assert not lock.healthy and not lock.abandon()
    assert lock.acquire()
    with pytest.raises(lockyard.AlreadyLockedError):
        lock.acquire()
    assert lock.unlock() is True
    assert lock.try_acquire()
    assert lock.abandon() and lock.fencing_token is None
    other = Lock(bucket_name="locks", path=name, ttl=5.0, **FAST)
    assert not other.acquire(timeout=0.3), "an abandoned lock stays until stale"


def test_threads_exclude_each_other(name: str) -> None:
    lock = Lock(bucket_name="locks", path=name, ttl=5.0, **FAST)
    inside, overlaps = [0], []

    def work() -> None:
        for _ in range(3):
            with lock:
                inside[0] += 1
                overlaps.append(inside[0])
                time.sleep(0.005)
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == [1] * 12


def test_instant_recovery_by_the_same_identity(name: str) -> None:
    options: dict[str, Any] = {
        "instance_identity_prefix": "runner-7",
        "thread_safe": False,
        "ttl": 60.0,
    }
    crashed = Lock(bucket_name="locks", path=name, **options)
    assert crashed.acquire() and crashed.abandon()
    started = time.monotonic()
    assert Lock(bucket_name="locks", path=name, **options).try_acquire()
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(
    "options",
    [
        {"bucket_name": "", "path": "p"},
        {"bucket_name": "b", "path": ""},
        {"bucket_name": "b", "path": "p", "ttl": 0},
        {"bucket_name": "b", "path": "p", "ttl": 30, "refresh_interval": 10},
        {"bucket_name": "b", "path": "p", "backoff_min": 2, "backoff_max": 1},
        {"bucket_name": "b", "path": "p", "backoff_multiplier": -1},
        {"bucket_name": "b", "path": "p", "backoff_min": -1},
        {"bucket_name": "b", "path": "p", "max_refresh_fails": 0},
        {"bucket_name": "b", "path": "p", "object_acl": "everyone"},
        {"bucket_name": "b", "path": "p", "thread_safe": "yes"},
        {"bucket_name": "b", "path": "p", "cloud_storage_options": {"retries": 3}},
        {"bucket_name": 7, "path": "p"},
    ],
)
def test_bad_options_are_config_errors(options: dict[str, Any]) -> None:
    with pytest.raises(lockyard.ConfigError):
        Lock(**options)


def test_a_missing_bucket_is_a_backend_error_naming_it(name: str) -> None:
    lock = Lock(bucket_name="no-such-bucket", path=name)
    with pytest.raises(lockyard.BackendError, match=r"no-such-bucket.*404"):
        lock.acquire(timeout=0)


def test_an_unreachable_endpoint_is_a_backend_error(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    lock = Lock(
        bucket_name="locks",
        path=name,
        cloud_storage_options={"emulator_host": "127.0.0.1:9"},
    )
    with pytest.raises(lockyard.BackendError, match="gs://locks/"):
        lock.acquire(timeout=0)


def test_ttl_and_the_gems_internal_state_readers(name: str) -> None:
    lock = Lock(bucket_name="locks", path=name, ttl=5.0, **FAST)
    assert lock.ttl == 5.0
    assert Lock(bucket_name="locks", path=f"{name}-default").ttl == 300.0
    assert not lock.owned_according_to_internal_state()
    assert not lock.locked_according_to_internal_state()
    with lock:
        assert lock.owned_according_to_internal_state()
        assert lock.locked_according_to_internal_state()
        assert lock.owned_according_to_server() and lock.locked_according_to_server()
        seen: dict[str, bool] = {}

        def look() -> None:
            seen["owned"] = lock.owned_according_to_internal_state()
            seen["locked"] = lock.locked_according_to_internal_state()
            seen["owned_on_server"] = lock.owned_according_to_server()

        other = threading.Thread(target=look)
        other.start()
        other.join()
        assert seen == {"owned": False, "locked": True, "owned_on_server": False}
    assert not lock.locked_according_to_internal_state()
    assert not lock.locked_according_to_server()


def test_records_at_every_level_reach_the_lockyard_logger(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="lockyard")
    with Lock(bucket_name="locks", path=name, ttl=5.0, **FAST):
        pass
    debug = [
        r.getMessage()
        for r in caplog.records
        if r.name == "lockyard" and r.levelno == logging.DEBUG
    ]
    assert "Acquiring lock" in debug and "Unlocked" in debug

    caplog.clear()
    caplog.set_level(logging.INFO, logger="lockyard")
    with Lock(bucket_name="locks", path=name, ttl=5.0, **FAST):
        pass
    assert not [r for r in caplog.records if r.levelno < logging.INFO]


def test_a_locks_own_logger_gets_its_records(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    mine = logging.getLogger(f"tests.{name}")
    mine.setLevel(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="lockyard")
    lock = Lock(bucket_name="locks", path=name, ttl=5.0, logger=mine, **FAST)
    with lock:
        pass
    assert "Acquiring lock" in [
        r.getMessage() for r in caplog.records if r.name == mine.name
    ]
    assert not [r for r in caplog.records if r.name == "lockyard"]

    adapted = logging.LoggerAdapter(mine, {"job": "deploy"})
    with Lock(bucket_name="locks", path=f"{name}-2", logger=adapted, **FAST):
        pass
    with pytest.raises(lockyard.ConfigError, match="logger"):
        Lock(bucket_name="locks", path=name, logger="lockyard")  # type: ignore[arg-type]
