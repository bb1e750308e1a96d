"""Ctrl-C interrupts a blocked add, slot or wait within a moment, and the
interrupted process is left holding and queueing nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable

import pytest
from lockyard.redis import WaitGroup
from redis_server import Redis

# Reports when KeyboardInterrupt arrived (CLOCK_MONOTONIC is system-wide,
# so the test can compare it with when it sent SIGINT).
BLOCK_UNTIL_CTRL_C = """
    import json, signal, sys, time
    from lockyard.redis import WaitGroup

    # A shell's background job starts with SIGINT ignored, and Python then
    # leaves it ignored: make Ctrl-C raise KeyboardInterrupt however the
    # tests were started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    wg = WaitGroup(sys.argv[1], sys.argv[2], limit=1)
    call = {
        "add": lambda: wg.add(),
        "slot": lambda: wg.slot().__enter__(),
        "wait": lambda: wg.wait(),
    }[sys.argv[3]]
    print("waiting", flush=True)
    try:
        call()
        print(json.dumps({"returned": True}), flush=True)
    except KeyboardInterrupt:
        print(json.dumps({"interrupted_at": time.monotonic()}), flush=True)
"""


@pytest.mark.parametrize("call", ["add", "slot", "wait"])
def test_ctrl_c_interrupts_a_blocked_call_promptly(
    redis: Redis,
    name: str,
    call: str,
    spawn: Callable[..., subprocess.Popen[str]],
    eventually: Callable[..., bool],
) -> None:
    wg = WaitGroup(redis.url, name, limit=1)
    token = wg.add()
    child = spawn(BLOCK_UNTIL_CTRL_C, redis.url, name, call)
    assert child.stdout is not None
    assert child.stdout.readline() == "waiting\n"
    time.sleep(0.5)  # well into the wait

    sent_at = time.monotonic()
    child.send_signal(signal.SIGINT)
    stdout, stderr = child.communicate(timeout=5)
    report = json.loads(stdout)
    assert "interrupted_at" in report, (report, stderr)
    # The core looks for signals between 50 ms BLPOPs, but redis-server
    # (hz 10) ends a blocking timeout only on its 100 ms tick: ~150 ms at
    # worst, plus a little for a loaded machine.
    assert report["interrupted_at"] - sent_at < 0.2

    # The child left the queue: the slot stays ours, a new waiter is not
    # stuck behind a ghost, and nothing but the fencing counter remains.
    assert wg.count() == 1
    assert wg.done(token)
    assert wg.done(wg.add(timeout=1.0))
    fence_only = [f"lockyard:{{{name}}}:fence"]
    assert eventually(lambda: redis.keys() == fence_only), redis.keys()
