"""lockyard.gcs.Lock against the faithful test server: the precondition
races fake-gcs-server cannot show, and injected faults (by the server, or
by the fault-injecting proxy in front of it)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lockyard
import pytest
from gcs_servers import FaultProxy, GcsServer, start_fault_proxy
from lockyard.gcs import Lock

FAST: dict[str, Any] = {"backoff_min": 0.02, "backoff_max": 0.1}


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
    # Its next refresh hangs past the TTL: past the expires_at it last
    # wrote, which may be up to a second (Date's resolution) beyond it.
    gcs.inject("update", "slow:3.5")
    taker = Lock(bucket_name="locks", path="a", ttl=5.0, **FAST)
    assert taker.acquire(timeout=5)
    assert not holder.healthy
    time.sleep(2.5)  # the hung refresh lands after the takeover: 412
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


@pytest.mark.parametrize("how", ["with", "release", "unlock"])
def test_ctrl_c_interrupts_a_release_the_bucket_keeps_failing(
    gcs: GcsServer, spawn: Callable[..., subprocess.Popen[str]], how: str
) -> None:
    # Every delete fails: the release would retry until the 60 s lease
    # deadline.
    child = spawn(
        """
        import sys
        from lockyard.gcs import Lock

        how = sys.argv[1]
        lock = Lock(bucket_name="locks", path="a", ttl=60.0)
        if how == "with":
            with lock:
                print("releasing", flush=True)
                input()
        else:
            lock.acquire()
            print("releasing", flush=True)
            input()
            getattr(lock, how)()
        """,
        how,
    )
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline() == "releasing\n"
    gcs.inject("delete", "503", 1000)
    child.stdin.write("\n")
    child.stdin.flush()
    time.sleep(1.0)  # a few retries in
    interrupted_at = time.monotonic()
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=10)
    assert time.monotonic() - interrupted_at < 1.5
    assert stderr.rstrip().endswith("KeyboardInterrupt"), stderr


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    server = start_fault_proxy()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.host)
    try:
        yield server
    finally:
        server.stop()


# Issue 21: "could not ask" is never taken for "lost", and is retried until
# the caller's timeout (acquire) or the lease deadline (refresh, release).


def test_a_503_on_the_read_after_a_lost_refresh_reply_is_not_a_loss(
    proxy: FaultProxy,
) -> None:
    lock = Lock(bucket_name="locks", path="a", ttl=3.0, refresh_interval=0.1)
    assert lock.acquire()
    proxy.inject("update", "lose_reply")  # lands; the next refresh gets 412
    proxy.inject("get", "503")  # and the read that would tell fails once
    time.sleep(0.8)
    assert lock.healthy, lock.last_refresh_error
    assert lock.unlock() is True


def test_acquire_rides_out_a_503_burst_within_its_timeout(proxy: FaultProxy) -> None:
    proxy.inject("create", "lose_reply")
    proxy.inject("create", "503", 7)
    lock = Lock(bucket_name="locks", path="a", ttl=300.0, **FAST)
    started = time.monotonic()
    assert lock.acquire(timeout=60)
    assert time.monotonic() - started > 1.5, "longer than the old five tries"
    assert lock.unlock() is True


def test_an_acquire_that_gives_up_removes_what_its_lost_create_left(
    proxy: FaultProxy,
) -> None:
    proxy.inject("create", "lose_reply")
    proxy.inject("create", "503", 1000)
    lock = Lock(bucket_name="locks", path="a", ttl=300.0)
    started = time.monotonic()
    with pytest.raises(lockyard.BackendError, match="503"):
        lock.acquire(timeout=3)
    assert time.monotonic() - started >= 3
    assert not Lock(bucket_name="locks", path="a").locked(), "no object for 300 s"


def test_unlock_after_a_delete_whose_reply_was_lost_returns_true(
    proxy: FaultProxy,
) -> None:
    lock = Lock(bucket_name="locks", path="a", ttl=5.0)
    assert lock.acquire()
    proxy.inject("delete", "lose_reply")
    assert lock.unlock() is True
    assert not lock.locked()


def user_credentials(token_uri: str) -> dict[str, str]:
    """gcloud's user credentials (``authorized_user``), whose token endpoint
    is `token_uri`."""
    return {
        "type": "authorized_user",
        "client_id": "lock-tests.apps.googleusercontent.com",
        "client_secret": "not-a-secret",
        "refresh_token": "refresh",
        "token_uri": token_uri,
    }


def test_a_failing_token_endpoint_is_retried_like_any_transient_error(
    proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    options = {
        "credentials": user_credentials(f"http://{proxy.host}/token"),
        "endpoint": f"http://{proxy.host}",
    }
    lock = Lock(
        bucket_name="locks", path="a", ttl=10.0, cloud_storage_options=options, **FAST
    )
    proxy.inject("token", "503", 12)  # more than the credentials' own retries
    assert lock.acquire(timeout=30)
    stats = proxy.call("GET", "/_proxy/stats")
    assert isinstance(stats, dict) and stats["token"] >= 13, "12 failures, then a token"
    assert lock.unlock() is True, "released, not left for its ttl"
    assert not lock.locked()


def test_workload_identity_federation_authorizes_through_sts(
    proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An ``external_account`` file as GitHub Actions' google-github-actions/auth
    writes it: the CI's OIDC token in a file, exchanged at STS."""
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    (tmp_path / "oidc").write_text("ci-oidc-token")
    credentials = {
        "type": "external_account",
        "audience": "//iam.googleapis.com/projects/1/locations/global/"
        "workloadIdentityPools/ci/providers/github",
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": f"http://{proxy.host}/sts/v1/token",
        "credential_source": {"file": str(tmp_path / "oidc")},
    }
    (tmp_path / "credentials.json").write_text(json.dumps(credentials))
    options = {
        "credentials": str(tmp_path / "credentials.json"),
        "endpoint": f"http://{proxy.host}",
    }
    lock = Lock(bucket_name="locks", path="wif", cloud_storage_options=options, **FAST)
    assert lock.acquire(timeout=10)
    assert lock.unlock() is True
    stats = proxy.call("GET", "/_proxy/stats")
    assert isinstance(stats, dict) and stats["bearers"] == ["Bearer sts:ci-oidc-token"]
