"""Review of b0a8d3c (logging): one hand at a time hands records to
Python, a call never waits for the forwarder's handlers, and what is
logged near exit or under a signal is not lost."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest
from lockyard.redis import Lock
from redis_server import Redis

FORWARDER = "lockyard-log-forwarder"
Spawn = Callable[..., "subprocess.Popen[str]"]


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
    redis.forget_holders(f"{name}-bg")
    assert slow.wait(5)

    lock = Lock(redis.url, name)
    lock.acquire()  # a call whose records are none: its take fails
    redis.forget_holders(name)
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
    loop = sys._getframe().f_code

    def interrupt(signum: int, frame: FrameType | None) -> None:
        nonlocal raised, armed
        # Only inside the try below, and only in the loop's own code or the
        # logging calls lockyard makes: a finalizer the garbage collector
        # runs meanwhile (a redis-py connection's __del__) may swallow what
        # is raised in it, which is no fault of lockyard's.
        code = frame.f_code if frame is not None else None
        if armed and code is not None and (code is loop or code.co_filename == logging.__file__):
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


def test_a_record_whose_logger_raises_does_not_take_the_rest_of_its_batch(
    redis: Redis, name: str, lockyard_logger: logging.Logger
) -> None:
    # `emit` hands a batch over record by record and stops at the first
    # error (`?`): the records after the one whose logger raised are
    # dropped, though their loggers (another lock's, here) work.
    delivered: list[str] = []
    slow = threading.Event()

    class Picky(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            message = record.getMessage()
            if f'"{name}-0"' in message:
                slow.set()
                time.sleep(2.0)  # meanwhile the next two are queued
            if f'"{name}-1"' in message:
                raise RuntimeError("a filter with a bug")
            delivered.append(message)
            return True

    lockyard_logger.addFilter(Picky())
    lockyard_logger.setLevel(logging.WARNING)
    try:
        locks = [Lock(redis.url, f"{name}-{i}", ttl=1.0) for i in range(3)]
        for lock in locks:
            lock.acquire()
        redis.forget_holders(f"{name}-0")
        assert slow.wait(5)
        redis.forget_holders(f"{name}-1")
        time.sleep(0.7)  # its refresher warns first (every ttl / 3)
        redis.forget_holders(f"{name}-2")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
            f'"{name}-2"' in m for m in delivered
        ):
            time.sleep(0.05)
    finally:
        lockyard_logger.filters.clear()
    assert any(f'"{name}-2"' in m for m in delivered), delivered


# The lock on A is lost while exiting waits (up to 2 s) for a daemon
# thread's call to B, which the test pauses.
LOST_WHILE_EXIT_WAITS = """
    import logging, sys, threading, time
    logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")
    from lockyard.redis import Lock

    url_a, url_b, name = sys.argv[1:4]
    lock = Lock(url_a, name, ttl=1.0)
    lock.acquire()
    other = Lock(url_b, name)
    other.locked()
    print("held", flush=True)
    sys.stdin.readline()
    threading.Thread(target=other.locked, daemon=True).start()
    time.sleep(0.1)
"""


def test_what_the_background_logs_while_exit_waits_is_not_lost(
    redis: Redis, name: str, tmp_path: Path, spawn: Spawn
) -> None:
    # Once before_exit has started, the forwarder parks instead of
    # attaching, and nothing hands over what arrives afterwards: the
    # refresher's warning, logged while exiting waits for a call in flight
    # (the interpreter fully alive, logging working), never appears.
    (tmp_path / "b").mkdir()
    other = Redis(tmp_path / "b")
    try:
        child = spawn(LOST_WHILE_EXIT_WAITS, redis.url, other.url, name)
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "held"
        other.command("CLIENT", "PAUSE", 2500, "ALL")
        redis.forget_holders(name)
        out, err = child.communicate("go\n", timeout=30)
    finally:
        other.stop()
    assert child.returncode == 0, err
    assert f'lock "{name}" lost' in out, (out, err)


# The process's first call runs in a finalizer at interpreter teardown.
FIRST_CALL_AT_TEARDOWN = """
    import sys
    from lockyard.redis import Lock

    url, name = sys.argv[1:3]

    class Late:
        def __del__(self):
            print("locked:", Lock(url, name).locked(), flush=True)

    keep = Late()
"""


def test_a_first_call_at_teardown_prints_no_traceback(
    redis: Redis, name: str, spawn: Spawn
) -> None:
    # The first call starts the forwarder thread; at teardown that fails
    # (`import threading`: "sys.meta_path is None"), prepare reports it as
    # unraisable and resets FORWARDER_IN, so every call then prints a
    # traceback to stderr -- though the calls work and the exiting thread
    # forwards its own records anyway.
    child = spawn(FIRST_CALL_AT_TEARDOWN, redis.url, name)
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert "locked: False" in out
    assert "Traceback" not in err, err
