"""What the library has to say arrives on the standard `lockyard` logger."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import lockyard
import pytest
from lockyard.redis import Lock, WaitGroup
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
        redis.forget_holders(name)
    assert warnings_about(caplog, "had been lost before it was released")


def test_what_the_background_logs_arrives_without_another_call(
    redis: Redis,
    name: str,
    caplog: pytest.LogCaptureFixture,
    eventually: Callable[..., bool],
) -> None:
    caplog.set_level(logging.WARNING, logger="lockyard")
    lock = Lock(redis.url, name, ttl=1.0)
    lock.acquire()
    # Its keys vanish (FLUSHALL, say): the refresher finds the hold gone on
    # its own thread, while this one makes no call into the library.
    redis.forget_holders(name)
    assert eventually(lambda: warnings_about(caplog, "lost"), timeout=3.0)
    with pytest.raises(lockyard.LockUnhealthyError):
        lock.check_health()


def test_the_lockyard_loggers_level_governs_and_a_change_holds_at_once(
    redis: Redis, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="lockyard")
    lock = Lock(redis.url, name, ttl=5.0)
    with lock:
        redis.forget_holders(name)
    assert not [r for r in caplog.records if r.name == "lockyard"]

    # Raised again, the very next call's records come through: the filter
    # follows the logger as it is when a call starts.
    caplog.set_level(logging.WARNING, logger="lockyard")
    with lock:
        redis.forget_holders(name)
    assert warnings_about(caplog, "had been lost before it was released")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_its_background_records_too(
    redis: Redis, name: str
) -> None:
    Lock(redis.url, f"{name}-parent").locked()  # the parent's forwarder runs

    pid = os.fork()
    if pid == 0:
        code = 2  # whatever happens, never return into pytest
        try:
            arrived = threading.Event()

            class Seen(logging.Handler):
                def emit(self, record: logging.LogRecord) -> None:
                    if "lost" in record.getMessage():
                        arrived.set()

            logging.getLogger("lockyard").addHandler(Seen())
            lock = Lock(redis.url, name, ttl=1.0)
            lock.acquire()
            redis.forget_holders(name)
            code = 0 if arrived.wait(3.0) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, (
        "no record reached the child's logger"
    )


def test_an_object_dropped_while_its_error_is_raised_keeps_the_error(
    redis: Redis, name: str
) -> None:
    # The temporary WaitGroup is dropped while its TimeoutError is on its
    # way out: the drop must not call into Python (logging) then, which
    # would swallow the error into a SystemError.
    WaitGroup(redis.url, name, limit=1).add(timeout=0)
    with pytest.raises(lockyard.TimeoutError):
        WaitGroup(redis.url, name, limit=1).add(timeout=0)
    with pytest.raises(lockyard.NotLockedError):
        Lock(redis.url, name).release()
