"""Ctrl-C interrupts a blocked acquire promptly and leaves nothing held."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

from lockyard.redis import Lock
from redis_server import Redis

WAIT_FOREVER = """
    import sys
    from lockyard.redis import Lock

    lock = Lock(sys.argv[1], sys.argv[2])
    print("waiting", flush=True)
    with lock:
        print("acquired", flush=True)
"""


def test_ctrl_c_interrupts_a_blocked_with_promptly(
    redis: Redis,
    name: str,
    spawn: Callable[..., subprocess.Popen[str]],
    eventually: Callable[..., bool],
) -> None:
    holder = Lock(redis.url, name)
    holder.acquire()
    child = spawn(WAIT_FOREVER, redis.url, name)
    assert child.stdout is not None
    assert child.stdout.readline() == "waiting\n"
    time.sleep(0.5)  # well into the wait

    interrupted_at = time.monotonic()
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=5)
    assert time.monotonic() - interrupted_at < 1.0
    assert child.returncode != 0
    assert stderr.rstrip().endswith("KeyboardInterrupt"), stderr

    # The child left the queue: the lock is free once its holder lets go,
    # and nothing but the fencing counter remains.
    holder.release()
    assert not holder.locked()
    fence_only = [f"lockyard:{{{name}}}:fence"]
    assert eventually(lambda: redis.keys() == fence_only), redis.keys()


def test_an_exception_from_a_signal_handler_interrupts_the_wait(
    url: str, name: str, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    with Lock(url, name):
        child = spawn(
            """
            import signal, sys
            from lockyard.redis import Lock

            class Deadline(Exception):
                pass

            def give_up(signum, frame):
                raise Deadline()

            lock = Lock(sys.argv[1], sys.argv[2])
            signal.signal(signal.SIGALRM, give_up)
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            try:
                lock.acquire()
            except Deadline:
                print("gave up; owned:", lock.owned())
            """,
            url,
            name,
        )
        stdout, stderr = child.communicate(timeout=10)
    assert stdout == "gave up; owned: False\n", stderr
