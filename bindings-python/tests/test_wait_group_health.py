"""A slot lost while held (its lease ran out, someone freed it) shows as
unhealthy, and leaving its `with` block warns on the `lockyard` logger."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import lockyard
import pytest
from lockyard.redis import WaitGroup
from redis_server import Redis
from test_lock_logging import warnings_about


def test_a_slot_lost_to_expiry_turns_unhealthy_and_warns_on_exit(
    redis: Redis,
    name: str,
    caplog: pytest.LogCaptureFixture,
    eventually: Callable[..., bool],
) -> None:
    caplog.set_level(logging.WARNING, logger="lockyard")
    wg = WaitGroup(redis.url, name, limit=2, ttl=1.0)
    with wg.slot() as slot:
        assert slot.healthy
        # Redis answers nobody for 1.5 s: the lease runs out unrefreshed.
        redis.command("CLIENT", "PAUSE", 1500, "ALL")
        time.sleep(1.6)
        assert eventually(lambda: not slot.healthy)
        with pytest.raises(lockyard.LockUnhealthyError, match=slot.token):
            slot.check_health()
        assert wg.count() == 0
    assert warnings_about(caplog, "had been lost before it was freed")


def test_a_slot_freed_by_someone_else_turns_unhealthy_at_the_next_refresh(
    url: str, name: str, eventually: Callable[..., bool]
) -> None:
    wg = WaitGroup(url, name, limit=1, ttl=1.0)
    token = wg.add()
    # Another group object has slots of its own, like another process.
    assert WaitGroup(url, name, limit=1).done(token)
    assert eventually(lambda: not wg.healthy(token), timeout=1.0)
    with pytest.raises(lockyard.LockUnhealthyError):
        wg.check_health(token)
    assert wg.done(token) is False
