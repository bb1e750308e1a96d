"""Review findings (round 1, e3599f5): who parks once exit has begun.

1. The exiting thread itself parks in finalizers. `must_not_attach` answers
   true whenever `Py_IsInitialized()` is 0, and Python clears that flag as
   finalization begins (after the exit handlers), before it clears the
   modules' globals and runs their finalizers on the exiting thread. A
   `__del__` that makes a lockyard call then (or the drop of a lock object
   held in a global) runs its call and parks the only thread that could
   finish exiting: the program hangs forever (gdb: `leave_for_good` under
   `Py_FinalizeEx`).

2. A process forked by a daemon thread while the parent exits inherits
   `EXIT_STARTED` and the parent's exiting-thread id: every lockyard call in
   the child returns and then parks its only thread, so the child hangs
   (here: ended by SIGALRM after 5 s). The child's interpreter is not
   exiting at all.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

Spawn = Callable[..., "subprocess.Popen[str]"]

CALL_IN_A_FINALIZER = """
    import sys
    from lockyard.redis import Lock

    url, name = sys.argv[1:3]
    lock = Lock(url, name)

    class Closer:
        # A resource that looks at its lock when collected: at exit, when
        # the module's globals are cleared, on the thread that finalizes.
        def __del__(self, lock=lock, out=sys.stdout):
            out.write(f"locked={lock.locked()}\\n")
            out.flush()

    closer = Closer()
"""


def test_a_finalizer_at_exit_may_still_call_lockyard(
    url: str, name: str, spawn: Spawn
) -> None:
    child = spawn(CALL_IN_A_FINALIZER, url, name)
    try:
        out, err = child.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        raise AssertionError(f"the program hung while exiting: {out!r} {err!r}")
    assert child.returncode == 0, err
    assert out.split() == ["locked=False"], err


FORK_WHILE_EXITING = """
    import atexit, os, signal, sys, threading, time

    url, name = sys.argv[1:3]
    done = threading.Event()

    def late():
        # Registered before lockyard's: runs after it, so exit has begun.
        done.wait(15)

    atexit.register(late)
    from lockyard.redis import Lock

    lock = Lock(url, name)

    def forker():
        time.sleep(0.3)
        pid = os.fork()
        if pid == 0:
            signal.alarm(5)  # a child that hangs is ended by SIGALRM
            lock.locked()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child status", status, flush=True)
        done.set()

    threading.Thread(target=forker, daemon=True).start()
"""


def test_a_child_forked_while_its_parent_exits_is_not_exiting(
    url: str, name: str, spawn: Spawn
) -> None:
    child = spawn(FORK_WHILE_EXITING, url, name)
    try:
        out, err = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
    assert "child status 0" in out, f"{out!r} {err!r}"
