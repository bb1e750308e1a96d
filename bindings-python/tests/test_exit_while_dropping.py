"""Review finding (round 1, e3599f5): building and dropping a lock object
are detached calls too, but not ones the exit handshake knows about.

`Unlocked::build` (`py.detach(build)`) and `Unlocked::drop`
(`Python::try_attach(|py| py.detach(dropping))`, which gives back what the
dropped object still holds: a Redis round trip) detach and re-attach
without going through `detach_unless_exiting`: they are not counted in
flight, so `before_exit` does not wait for them, and they re-attach without
checking `must_not_attach`. A daemon thread that builds a lock, or drops
the last reference to one, while the program exits re-attaches to a
finalizing interpreter: Python ends the thread with pthread_exit inside
Rust frames and the process aborts (status 134, "FATAL: exception not
rethrown") -- the crash e3599f5 fixed for every other detached call.

gdb on the drop case: take_gil -> PyThread_exit_thread -> pthread_exit ->
abort, under `<Unlocked<T> as Drop>::drop` in `tp_dealloc`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

Spawn = Callable[..., "subprocess.Popen[str]"]

# Daemon threads build lock objects while the program exits.
BUILD_WHILE_EXITING = """
    import sys, threading, time
    from lockyard.redis import Lock

    url, name = sys.argv[1:3]
    started = threading.Event()
    kept = []

    def build():
        while True:
            kept.append(Lock(url, name))
            started.set()

    for _ in range(4):
        threading.Thread(target=build, daemon=True).start()
    started.wait()
    time.sleep(0.05)
"""

# Daemon threads drop lock objects (built before, so only the drop runs
# while the program exits); the last reference goes with each pop. The
# program exits once the drops are well under way, with most of the pool
# left: a thread that emptied it would print its IndexError while Python
# finalizes, and CPython itself aborts on that ("could not acquire lock for
# <stderr> at interpreter shutdown"), which is not what this test is about.
DROP_WHILE_EXITING = """
    import sys, threading, time
    from lockyard.redis import Lock

    url, name = sys.argv[1:3]
    pool = [Lock(url, name) for _ in range(30000)]

    def drop():
        try:
            while True:
                pool.pop()
        except IndexError:
            threading.Event().wait()

    for _ in range(4):
        threading.Thread(target=drop, daemon=True).start()
    while len(pool) > 25000:
        time.sleep(0.0005)
"""

# Daemon threads take a lock and drop its object while holding it: the
# drop releases the lock, a Redis round trip.
DROP_HELD_WHILE_EXITING = """
    import sys, threading, time
    from lockyard.redis import Lock

    url, name = sys.argv[1:3]
    started = threading.Event()

    def churn(i):
        while True:
            lock = Lock(url, f"{name}-{i}")
            lock.acquire()
            started.set()
            del lock

    for i in range(4):
        threading.Thread(target=churn, args=(i,), daemon=True).start()
    started.wait()
    time.sleep(0.05)
"""


def exits_cleanly_every_time(code: str, url: str, name: str, spawn: Spawn) -> None:
    for run in range(20):
        child = spawn(code, url, name)
        _, err = child.communicate(timeout=60)
        assert child.returncode == 0, f"run {run}: status {child.returncode}: {err}"


def test_daemon_threads_building_locks_while_exiting_do_not_abort(
    url: str, name: str, spawn: Spawn
) -> None:
    exits_cleanly_every_time(BUILD_WHILE_EXITING, url, name, spawn)


def test_daemon_threads_dropping_locks_while_exiting_do_not_abort(
    url: str, name: str, spawn: Spawn
) -> None:
    exits_cleanly_every_time(DROP_WHILE_EXITING, url, name, spawn)


def test_daemon_threads_dropping_held_locks_while_exiting_do_not_abort(
    url: str, name: str, spawn: Spawn
) -> None:
    exits_cleanly_every_time(DROP_HELD_WHILE_EXITING, url, name, spawn)
