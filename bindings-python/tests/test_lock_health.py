"""A holder that was paused past its TTL learns it may have lost the lock,
and the fencing token tells the protected resource who is newer."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable

from lockyard.redis import Lock

HOLD_AND_REPORT = """
    import json, sys
    import lockyard
    from lockyard.redis import Lock

    lock = Lock(sys.argv[1], sys.argv[2], ttl=1.0)
    lock.acquire()
    print(json.dumps({"fencing_token": lock.fencing_token}), flush=True)
    sys.stdin.readline()  # paused here, then asked for a report
    try:
        lock.check_health()
        error = None
    except lockyard.LockUnhealthyError as e:
        error = str(e)
    print(json.dumps({"healthy": lock.healthy, "error": error}), flush=True)
"""


def test_paused_holder_becomes_unhealthy_after_takeover(
    url: str, name: str, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    paused = spawn(HOLD_AND_REPORT, url, name)
    assert paused.stdin is not None and paused.stdout is not None
    paused_token = json.loads(paused.stdout.readline())["fencing_token"]

    paused.send_signal(signal.SIGSTOP)
    taken_at = time.monotonic()
    taker = Lock(url, name, ttl=10.0)
    assert taker.acquire(timeout=5.0), "the paused holder's lease should run out"
    time.sleep(max(0.0, 2.0 - (time.monotonic() - taken_at)))
    paused.send_signal(signal.SIGCONT)

    paused.stdin.write("report\n")
    report = json.loads(paused.stdout.readline())
    assert report["healthy"] is False
    assert report["error"] is not None and name in report["error"]
    assert taker.fencing_token is not None and taker.fencing_token > paused_token
    assert taker.owned()
    taker.release()
