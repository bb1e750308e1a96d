"""What the library has to say arrives on the standard `lockyard` logger."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import lockyard
import pytest
from lockyard.redis import Lock
from redis_server import Redis


def warnings_about(
    caplog: pytest.LogCaptureFixture, text: str
) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "lockyard"
        and r.levelno == logging.WARNING
        and text in r.getMessage()
    ]


def test_a_lock_lost_to_expiry_is_logged_as_a_warning(
    redis: Redis,
    name: str,
    caplog: pytest.LogCaptureFixture,
    eventually: Callable[..., bool],
) -> None:
    caplog.set_level(logging.WARNING, logger="lockyard")
    lock = Lock(redis.url, name, ttl=1.0)
    lock.acquire()
    # Redis answers nobody for 1.5 s: the refresher cannot renew the lease,
    # and when the server answers again the lease has run out.
    redis.command("CLIENT", "PAUSE", 1500, "ALL")
    time.sleep(1.6)

    # The refresher notices on its own thread; the warning is handed to
    # `logging` by the next call this thread makes into the library.
    assert eventually(lambda: not lock.healthy and warnings_about(caplog, "lost"))
    with pytest.raises(lockyard.LockUnhealthyError):
        lock.check_health()

    lock.release()
    assert warnings_about(caplog, "had been lost before it was released")
    assert not lock.locked()


def test_leaving_a_with_whose_lock_was_lost_warns_instead_of_raising(
    redis: Redis, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="lockyard")
    lock = Lock(redis.url, name, ttl=5.0)
    with lock:
        # Someone deletes the lock's keys behind its back (FLUSHALL, say).
        redis.command("DEL", f"lockyard:{{{name}}}:holders")
    assert warnings_about(caplog, "had been lost before it was released")
