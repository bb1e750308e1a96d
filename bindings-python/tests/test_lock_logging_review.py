"""Review of b0a8d3c (logging): one hand at a time hands records to
Python, a call never waits for the forwarder's handlers, and what is
logged near exit or under a signal is not lost."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from lockyard.redis import Lock
from redis_server import Redis

FORWARDER = "lockyard-log-forwarder"


@pytest.fixture
def lockyard_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("lockyard")
    level, handlers = logger.level, logger.handlers[:]
    try:
        yield logger
    finally:
        logger.setLevel(level)
        logger.handlers[:] = handlers


def test_a_call_does_not_emit_while_the_forwarder_is_emitting(
    redis: Redis, name: str, lockyard_logger: logging.Logger
) -> None:
    # `Emitting::take` builds its guard with `bool::then_some(Emitting)`,
    # which constructs the guard even when the take failed; dropping that
    # unused guard stores 0 in EMITTING and frees the right the forwarder
    # holds. The next call then emits alongside the forwarder: two hands
    # at once (batches interleave) and the call waits for the forwarder's
    # handler (here, a slow one) -- what `forward` says it never does.
    inside: list[str] = []
    overlapped: list[tuple[str, ...]] = []
    slow = threading.Event()

    class Handler(logging.Handler):
        def handle(self, record: logging.LogRecord) -> bool:
            # No handler lock: see whether two threads emit at once.
            me = threading.current_thread().name
            inside.append(me)
            if len(inside) > 1:
                overlapped.append(tuple(inside))
            try:
                if me == FORWARDER and "lost:" in record.getMessage():
                    slow.set()
                    time.sleep(1.5)
            finally:
                inside.remove(me)
            return True

    lockyard_logger.addHandler(Handler())
    lockyard_logger.setLevel(logging.WARNING)
    background = Lock(redis.url, f"{name}-bg", ttl=1.0)
    background.acquire()
    # The refresher finds the hold gone and warns on its own thread: the
    # forwarder hands the warning over and stays in the slow handler.
    redis.command("DEL", f"lockyard:{{{name}-bg}}:holders")
    assert slow.wait(5)

    lock = Lock(redis.url, name)
    lock.acquire()  # a call whose records are none: its take fails
    redis.command("DEL", f"lockyard:{{{name}}}:holders")
    started = time.monotonic()
    lock.release()  # warns "had been lost before it was released"
    took = time.monotonic() - started
    assert not overlapped, f"two threads emitted at once: {overlapped}"
    assert took < 0.75, f"release waited {took:.2f}s for the forwarder's handler"


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
def test_an_exception_raised_by_a_signal_handler_is_not_swallowed(
    redis: Redis, name: str
) -> None:
    # Every call starts by running the lockyard logger's getEffectiveLevel
    # (Python code) and ignores any error it raises ("a logging module
    # patched beyond use keeps the last level"). A signal that arrives
    # then has its handler run inside that code: the exception it raises
    # (KeyboardInterrupt for Ctrl-C) is dropped and the call goes on as if
    # nothing happened. Here a timer's handler raises in a loop of calls;
    # every exception it raised must reach the loop.
    class Interrupted(Exception):
        pass

    raised = 0
    armed = False

    def interrupt(signum: int, frame: object) -> None:
        nonlocal raised, armed
        if armed:  # only inside the try below
            armed = False
            raised += 1
            raise Interrupted

    lock = Lock(redis.url, name)
    caught = 0
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
    try:
        for _ in range(5000):
            try:
                armed = True
                lock.owned()
                armed = False
            except Interrupted:
                caught += 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, previous)
    assert raised > 100
    assert caught == raised, f"{raised - caught} of {raised} exceptions were swallowed"
