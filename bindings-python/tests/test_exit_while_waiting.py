"""A program that exits while a daemon thread waits for a lock exits
cleanly and leaves nothing queued: the waiter gives up its place instead of
re-attaching to an interpreter that is finalizing (which panicked in the
waiter's poll, or aborted the process)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from lockyard.redis import Lock

Spawn = Callable[..., "subprocess.Popen[str]"]

# A daemon thread waits for a lock the test holds while the program exits;
# finalizing takes a moment (a slow __del__: several of the waiter's 50 ms
# polls).
EXIT_WHILE_WAITING = """
    import sys, threading, time
    from lockyard.redis import Lock

    url, name = sys.argv[1:3]
    waiter = Lock(url, name)
    started = threading.Event()

    def wait():
        started.set()
        waiter.acquire()

    threading.Thread(target=wait, daemon=True).start()
    started.wait()
    time.sleep(0.1)

    class SlowToFinalize:
        def __del__(self):
            time.sleep(0.3)

    slow = SlowToFinalize()
"""


def test_exiting_with_a_daemon_thread_waiting_is_clean_every_time(
    url: str, name: str, spawn: Spawn
) -> None:
    holder = Lock(url, name)
    for run in range(20):
        assert holder.try_acquire()
        child = spawn(EXIT_WHILE_WAITING, url, name)
        _, err = child.communicate(timeout=30)
        assert child.returncode == 0, f"run {run}: {err}"
        assert "panicked" not in err, f"run {run}: {err}"
        holder.release()
        # Nobody is left queued to be handed the lock: it is free at once,
        # not after the 2 s handoff window of a waiter that is gone.
        after = Lock(url, name)
        assert after.try_acquire(), f"run {run}"
        after.release()


# Daemon threads keep making quick calls (each a Redis round trip) and
# taking turns with the lock while the program exits: a call returns, or a
# wait is handed the lock, while the interpreter finalizes.
EXIT_WHILE_CALLING = """
    import sys, threading, time
    from lockyard.redis import Lock

    url, name = sys.argv[1:3]
    lock = Lock(url, name)
    started = threading.Event()

    def poll():
        while True:
            lock.locked()
            started.set()

    def take_turns():
        while True:
            with lock:
                pass

    for work in (poll, poll, take_turns, take_turns):
        threading.Thread(target=work, daemon=True).start()
    started.wait()

    class SlowToFinalize:
        def __del__(self):
            time.sleep(0.3)

    slow = SlowToFinalize()
"""


def test_exiting_while_daemon_threads_make_calls_is_clean_every_time(
    url: str, name: str, spawn: Spawn
) -> None:
    for run in range(20):
        child = spawn(EXIT_WHILE_CALLING, url, name)
        _, err = child.communicate(timeout=30)
        assert child.returncode == 0, f"run {run}: {err}"
        assert "panicked" not in err, f"run {run}: {err}"


# Exit handlers registered before lockyard was imported run after its own,
# on the exiting thread itself: that thread still takes, waits for and
# releases locks as usual.
LOCK_IN_A_LATE_EXIT_HANDLER = """
    import atexit, sys

    url, name = sys.argv[1:3]

    def last_words():
        with Lock(url, name, timeout=5):
            print("held", flush=True)
        print("released", flush=True)

    atexit.register(last_words)
    from lockyard.redis import Lock
"""


def test_the_exiting_thread_still_takes_locks_in_exit_handlers(
    url: str, name: str, spawn: Spawn
) -> None:
    holder = Lock(url, name)
    assert holder.try_acquire()
    child = spawn(LOCK_IN_A_LATE_EXIT_HANDLER, url, name)
    time.sleep(0.5)
    holder.release()
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert out.split() == ["held", "released"], err
