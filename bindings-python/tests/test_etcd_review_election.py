"""Second adversarial review of lockyard.etcd.Election (after ff6e81a):
each test states what must hold; a test marked FINDING fails on ddeee58
and tells what that code does instead."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

from etcd_server import Etcd

Spawn = Callable[..., "subprocess.Popen[str]"]

# Two threads read one observer: one waits in next() (nothing changes),
# then the main thread calls next() too and is sent Ctrl-C.
SHARED_OBSERVER = """
    import sys, threading, time
    from lockyard.etcd import Election, Session

    url, name = sys.argv[1:3]
    session = Session(url, ttl=5.0)
    election = Election(url, name, session)
    observer = election.observe()
    print(next(observer), flush=True)
    threading.Thread(target=lambda: next(observer, None), daemon=True).start()
    time.sleep(0.5)
    try:
        print("waiting", flush=True)
        next(observer)
        print("changed", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
"""


# FINDING (a next() on an observer another thread is reading ignores Ctrl-C).
#
# Must hold (the binding's rule, unlocked.rs: a wait "that Ctrl-C can cut
# short"; Observer.__next__ waits through `Unlocked::wait` so that Ctrl-C
# ends it; an Observer is an ordinary iterator object that two threads
# may both hold): a next() blocked on an observer is ended by Ctrl-C
# (KeyboardInterrupt) within moments, whatever other threads do with it.
#
# What happens: the native Observer keeps the core observer in a
# std::sync::Mutex, locked inside the detached wait closure *before* the
# core call that polls for signals. The second next() blocks in
# `Mutex::lock` without the GIL and never polls: SIGINT sets Python's flag,
# nobody checks it, and the main thread stays stuck as long as the other
# thread's next() waits (forever here: timeout None and no change). The
# same holds for the Ruby Observer (`NoGvl<Mutex<Observer>>`), though Ruby
# hands each `observe` its own. The fix: try_lock in a loop that polls
# `interrupted` (or a Mutex whose lock is a polled wait), or raise a clear
# error when the observer is in use by another thread.
def test_ctrl_c_ends_next_on_an_observer_another_thread_is_reading(
    etcd: Etcd, name: str, spawn: Spawn
) -> None:
    child = spawn(SHARED_OBSERVER, etcd.url, name)
    assert child.stdout is not None
    assert child.stdout.readline() == "Term(value=None, fencing_token=0)\n"
    assert child.stdout.readline() == "waiting\n"
    # Into next() by now, behind the other thread's (a signal before it
    # would still land inside the try, and prove nothing).
    time.sleep(0.5)
    child.send_signal(signal.SIGINT)
    try:
        out, err = child.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        _, err = child.communicate(timeout=10)
        raise AssertionError(
            "Ctrl-C did not end a next() waiting behind another thread's next() on the "
            f"same observer within 10 s: {err[-2000:]}"
        ) from None
    assert out == "interrupted\n", (out, err)
