"""lockyard.gcs.Lock against fake-gcs-server: API shape, the gem's rules,
errors, threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import lockyard
import pytest
from gcs_servers import GcsServer, start_fake_gcs
from lockyard.gcs import Lock

FAST: dict[str, Any] = {"backoff_min": 0.02, "backoff_max": 0.1}


@pytest.fixture(scope="module")
def gcs() -> Iterator[GcsServer]:
    server = start_fake_gcs()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def emulator(gcs: GcsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.host)


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
