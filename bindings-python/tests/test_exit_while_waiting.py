"""A program that exits while a daemon thread waits for a lock exits
cleanly and leaves nothing queued: the waiter gives up its place instead of
re-attaching to an interpreter that is finalizing (which panicked in the
waiter's poll, or aborted the process)."""

from __future__ import annotations

import subprocess
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
