"""Bad input gets a clear, typed error and changes nothing; an unreachable
server is a BackendError that says which server."""

from __future__ import annotations

import time
from typing import Any

import lockyard
import pytest
from bad_options import BAD_LEASE_OPTIONS, assert_rejected
from lockyard.redis import Lock
from redis_server import Redis, free_port

BAD_OPTIONS: list[dict[str, Any]] = [
    *BAD_LEASE_OPTIONS,
    {"timeout": -0.5},
    {"timeout": "soon"},
    {"timeout": 1e19},  # past 100 years: None waits forever
    {"identity_prefix": ""},
    {"identity_prefix": 7},
]


@pytest.mark.parametrize("options", BAD_OPTIONS, ids=repr)
def test_bad_options_raise_config_error_and_write_nothing(
    redis: Redis, name: str, options: dict[str, Any]
) -> None:
    assert_rejected(redis, lambda **o: Lock(redis.url, name, **o), options)


@pytest.mark.parametrize("bad_name", ["", "a{b", "x}", 5, None])
def test_bad_names_raise_config_error(redis: Redis, bad_name: Any) -> None:
    with pytest.raises(lockyard.ConfigError, match="name"):
        Lock(redis.url, bad_name)
    assert redis.dbsize() == 0


@pytest.mark.parametrize(
    "bad_url", ["", "http://127.0.0.1:6379", "redis://host:notaport", "nonsense", None]
)
def test_bad_urls_raise_config_error(bad_url: Any) -> None:
    with pytest.raises(lockyard.ConfigError):
        Lock(bad_url, "deploy")


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf"), 1e19, "1"])
def test_bad_acquire_timeouts_raise_config_error(
    redis: Redis, name: str, timeout: Any
) -> None:
    lock = Lock(redis.url, name)
    with pytest.raises(lockyard.ConfigError, match="timeout"):
        lock.acquire(timeout)
    assert redis.dbsize() == 0


def test_a_timeout_with_blocking_false_is_a_config_error(url: str, name: str) -> None:
    with pytest.raises(lockyard.ConfigError, match="blocking"):
        Lock(url, name).acquire(1.0, blocking=False)


def test_ints_are_seconds_too(url: str, name: str) -> None:
    with Lock(
        url, name, ttl=2, timeout=1, refresh_interval=0.1, connect_timeout=1
    ) as lock:
        lock.check_health()


def test_unreachable_server_is_a_backend_error_naming_host_and_port() -> None:
    port = free_port()  # nothing listens there
    lock = Lock(f"redis://127.0.0.1:{port}/0", "deploy", connect_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(lockyard.BackendError, match=f"127.0.0.1:{port}"):
        lock.acquire()
    assert time.monotonic() - started < 1.5
    with pytest.raises(lockyard.BackendError, match=f"127.0.0.1:{port}"):
        lock.locked()
