"""Option values that every Redis primitive rejects with a ConfigError
naming the option, before it touches the server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lockyard
import pytest
from redis_server import Redis

BAD_LEASE_OPTIONS: list[dict[str, Any]] = [
    {"ttl": 0},
    {"ttl": -1.0},
    {"ttl": float("nan")},
    {"ttl": float("inf")},
    # Durations past 30 days (issue 16): 1e16 s and 1e19 s overflowed a
    # deadline or Redis; 2**64 ms wrapped around into a 380 ms lease.
    {"ttl": 31 * 86400},
    {"ttl": 1e16},
    {"ttl": 18446744073709551.616},
    {"ttl": 1e19},
    {"ttl": "30"},
    {"ttl": True},
    {"refresh_interval": 0},
    {"refresh_interval": 10.0},  # not below ttl / max_refresh_fails
    {"max_refresh_fails": 0},
    {"max_refresh_fails": -1},
    {"max_refresh_fails": 1.5},
    {"connect_timeout": 0},
    {"connect_timeout": -1},
    {"connect_timeout": 1e19},
]


def assert_rejected(
    redis: Redis, construct: Callable[..., object], options: dict[str, Any]
) -> None:
    """`construct(**options)` raises a ConfigError (a ValueError) naming
    the first option, and Redis stays empty."""
    with pytest.raises(lockyard.ConfigError) as raised:
        construct(**options)
    assert isinstance(raised.value, ValueError)
    assert next(iter(options)) in str(raised.value)
    assert redis.dbsize() == 0
