"""lockyard.gcs.Lock against the faithful test server: the precondition
races fake-gcs-server cannot show, and injected faults."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gcs_servers import GcsServer, start_faithful_gcs
from lockyard.gcs import Lock

FAST: dict[str, Any] = {"backoff_min": 0.02, "backoff_max": 0.1}


@pytest.fixture
def gcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[GcsServer]:
    server = start_faithful_gcs()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.host)
    try:
        yield server
    finally:
        server.stop()


def test_uncontended_cycle_is_two_requests(gcs: GcsServer) -> None:
    lock = Lock(bucket_name="locks", path="a", ttl=5.0)
    with lock:
        pass
    assert gcs.call("GET", "/_stats") == {
        "create": 1,
        "get": 0,
        "update": 0,
        "delete": 1,
    }


def test_paused_holder_is_taken_over_turns_unhealthy_and_unlock_says_false(
    gcs: GcsServer,
) -> None:
    holder = Lock(bucket_name="locks", path="a", ttl=1.5, refresh_interval=0.1)
    assert holder.acquire()
    gcs.inject("update", "slow:2.5")  # its next refresh hangs past the TTL
    taker = Lock(bucket_name="locks", path="a", ttl=5.0, **FAST)
    assert taker.acquire(timeout=5)
    assert not holder.healthy
    time.sleep(1.5)  # the hung refresh lands after the takeover: 412
    assert "another holder" in (holder.last_refresh_error or "")
    assert holder.unlock() is False
    assert taker.owned(), "the late unlock left the new holder's object alone"
    taker.release()


def test_transient_errors_are_retried_not_taken_for_lost(gcs: GcsServer) -> None:
    gcs.inject("create", "503")
    gcs.inject("create", "reset")
    lock = Lock(
        bucket_name="locks",
        path="a",
        ttl=3.0,
        refresh_interval=0.1,
        max_refresh_fails=5,
    )
    assert lock.acquire()
    gcs.inject("update", "429", 2)
    gcs.inject("update", "lose_reply")
    time.sleep(0.8)
    assert lock.healthy
    gcs.inject("delete", "503")
    assert lock.unlock() is True


def test_server_clock_skew_changes_nothing(gcs: GcsServer) -> None:
    gcs.call("POST", "/_skew", {"seconds": 3600})
    holder = Lock(bucket_name="locks", path="a", ttl=2.0, refresh_interval=0.2)
    assert holder.acquire()
    waiter = Lock(bucket_name="locks", path="a", ttl=2.0, **FAST)
    assert not waiter.acquire(timeout=2.5)
    assert holder.healthy
    holder.release()


def test_ctrl_c_interrupts_a_wait_promptly(
    gcs: GcsServer, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    holder = Lock(bucket_name="locks", path="a", ttl=30.0)
    holder.acquire()
    child = spawn(
        """
        from lockyard.gcs import Lock

        lock = Lock(bucket_name="locks", path="a", backoff_min=5, backoff_max=5)
        print("waiting", flush=True)
        with lock:
            print("acquired", flush=True)
        """
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "waiting\n"
    time.sleep(0.5)  # inside its first 5 s backoff
    interrupted_at = time.monotonic()
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=5)
    assert time.monotonic() - interrupted_at < 1.0
    assert stderr.rstrip().endswith("KeyboardInterrupt"), stderr
    holder.release()
