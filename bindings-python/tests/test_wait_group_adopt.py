"""A WaitGroup slot handed to another process: the adder adds and exits
cleanly, the worker it handed the token to adopts it and keeps it alive for
as long as it works, and the limit holds throughout."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

import lockyard
import pytest
from lockyard.redis import WaitGroup
from redis_server import Redis

Spawn = Callable[..., "subprocess.Popen[str]"]
TTL = 0.6

ADDER = """
    import sys
    from lockyard.redis import WaitGroup

    wg = WaitGroup(sys.argv[1], sys.argv[2], limit=1, ttl=float(sys.argv[3]))
    print(wg.add(timeout=5.0), flush=True)
"""

WORKER = """
    import sys
    from lockyard.redis import WaitGroup

    wg = WaitGroup(sys.argv[1], sys.argv[2], limit=1, ttl=float(sys.argv[3]))
    token = sys.stdin.readline().strip()
    print(wg.adopt(token), wg.fencing_token(token), flush=True)
    for line in sys.stdin:
        if line.strip() == "done":
            print(wg.done(token), flush=True)
        else:
            print(wg.healthy(token), flush=True)
"""


def ask(child: subprocess.Popen[str], line: str) -> str:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(line + "\n")
    child.stdin.flush()
    return child.stdout.readline().strip()


def add_and_exit(spawn: Spawn, url: str, name: str) -> str:
    """The token of a slot an adder process took before exiting cleanly."""
    adder = spawn(ADDER, url, name, str(TTL))
    out, err = adder.communicate(timeout=30)
    assert adder.returncode == 0, err
    return out.strip()


def test_an_adder_that_exits_leaves_its_slot_to_run_out(
    spawn: Spawn, url: str, name: str
) -> None:
    token = add_and_exit(spawn, url, name)
    observer = WaitGroup(url, name, limit=1, ttl=TTL)
    assert observer.count() == 1, "freed when the adder exited"
    time.sleep(TTL + 0.3)
    assert observer.count() == 0, "never refreshed, it ran out"
    assert observer.adopt(token) is False
    assert observer.done(token) is False


def test_an_adopted_slot_stays_held_past_the_ttl_until_done(
    spawn: Spawn, redis: Redis, url: str, name: str
) -> None:
    observer = WaitGroup(url, name, limit=1, ttl=TTL)
    token = add_and_exit(spawn, url, name)
    worker = spawn(WORKER, url, name, str(TTL))
    adopted, fence = ask(worker, token).split()
    assert adopted == "True"
    assert int(fence) > 0
    time.sleep(TTL * 3)
    assert ask(worker, "healthy?") == "True"
    assert observer.count() == 1
    with pytest.raises(lockyard.TimeoutError):
        observer.add(timeout=0.3)  # the limit holds while the worker runs
    assert ask(worker, "done") == "True"
    assert observer.count() == 0
    assert redis.keys() == [f"lockyard:{{{name}}}:fence"]


def test_a_worker_killed_after_adopting_frees_the_slot_after_the_ttl(
    spawn: Spawn, url: str, name: str
) -> None:
    observer = WaitGroup(url, name, limit=1, ttl=TTL)
    token = observer.add()  # the adder lives on: only the worker refreshes now
    worker = spawn(WORKER, url, name, str(TTL))
    assert ask(worker, token).startswith("True ")
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    killed = time.monotonic()
    with pytest.raises(lockyard.TimeoutError):
        observer.add(timeout=0)
    second = observer.add(timeout=5.0)
    waited = time.monotonic() - killed
    assert 0.2 < waited < TTL + 0.5, waited
    assert observer.healthy(token) is False
    assert observer.done(second) is True
