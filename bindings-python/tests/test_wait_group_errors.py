"""Bad input to a WaitGroup is a ConfigError before anything touches Redis;
an unreachable server is a BackendError that says which server."""

from __future__ import annotations

import time
from typing import Any

import lockyard
import pytest
from bad_options import BAD_LEASE_OPTIONS, assert_rejected
from lockyard.redis import WaitGroup
from redis_server import Redis, free_port

BAD_OPTIONS: list[dict[str, Any]] = [
    {"limit": 0},
    {"limit": -1},
    {"limit": 2.5},
    {"limit": "3"},
    {"limit": True},
    {"limit": None},
    {"limit": 2**32},
    *BAD_LEASE_OPTIONS,
]


@pytest.mark.parametrize("options", BAD_OPTIONS, ids=repr)
def test_bad_options_raise_config_error_and_write_nothing(
    redis: Redis, name: str, options: dict[str, Any]
) -> None:
    # Every other argument is valid: `limit` is 3 unless the case sets it.
    assert_rejected(
        redis, lambda **o: WaitGroup(redis.url, name, **{"limit": 3, **o}), options
    )


@pytest.mark.parametrize("bad_name", ["", "a{b", "x}", 5, None])
def test_bad_names_raise_config_error(redis: Redis, bad_name: Any) -> None:
    with pytest.raises(lockyard.ConfigError, match="name"):
        WaitGroup(redis.url, bad_name, limit=3)
    assert redis.dbsize() == 0


@pytest.mark.parametrize(
    "bad_url", ["", "http://127.0.0.1:6379", "redis://host:notaport", None]
)
def test_bad_urls_raise_config_error(bad_url: Any) -> None:
    with pytest.raises(lockyard.ConfigError):
        WaitGroup(bad_url, "api-quota", limit=3)


def test_limit_is_required() -> None:
    with pytest.raises(TypeError, match="limit"):
        WaitGroup("redis://127.0.0.1:6379/0", "api-quota")  # type: ignore[call-arg]


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf"), 1e19, "1"])
def test_bad_timeouts_raise_config_error(redis: Redis, name: str, timeout: Any) -> None:
    wg = WaitGroup(redis.url, name, limit=1)
    for call in (wg.add, wg.wait, wg.slot):
        with pytest.raises(lockyard.ConfigError, match="timeout"):
            call(timeout)
    assert redis.dbsize() == 0


@pytest.mark.parametrize("token", [None, 7, b"bytes"])
def test_tokens_that_are_not_str_raise_config_error(
    redis: Redis, name: str, token: Any
) -> None:
    wg = WaitGroup(redis.url, name, limit=1)
    for call in (wg.done, wg.healthy, wg.check_health, wg.fencing_token):
        with pytest.raises(lockyard.ConfigError, match="token"):
            call(token)
    assert redis.dbsize() == 0


def test_unreachable_server_is_a_backend_error_naming_host_and_port() -> None:
    port = free_port()  # nothing listens there
    wg = WaitGroup(f"redis://127.0.0.1:{port}/0", "api-quota", 3, connect_timeout=1.0)
    started = time.monotonic()
    for call in (wg.add, wg.wait, wg.count, lambda: wg.done("token")):
        with pytest.raises(lockyard.BackendError, match=f"127.0.0.1:{port}"):
            call()
    assert time.monotonic() - started < 6.0
    with pytest.raises(lockyard.BackendError), wg.slot():
        pytest.fail("entered a slot of an unreachable server")


def test_another_limit_than_the_groups_is_a_config_error_naming_both(
    url: str, name: str
) -> None:
    two = WaitGroup(url, name, limit=2)
    with (
        two.slot(timeout=0),
        pytest.raises(lockyard.ConfigError, match="limit 2.*limit 5"),
    ):
        WaitGroup(url, name, limit=5).add(timeout=0)
    # Idle again: the next client's limit is the group's.
    five = WaitGroup(url, name, limit=5)
    five.done(five.add(timeout=0))
