"""A child forked while the background logs is not stuck on the log queue."""

from __future__ import annotations

import logging
import os
import time

import pytest
from gcs_servers import GcsServer
from lockyard.gcs import Lock


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_children_forked_while_records_flow_never_hang(
    fake_gcs: GcsServer, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.host)
    quiet = logging.getLogger(f"tests.{name}")
    quiet.setLevel(logging.DEBUG)
    quiet.propagate = False
    # Sixteen holds refreshed every 10 ms: the runtime threads push a
    # record ("Refreshing lock") to the queue all the time.
    locks = [
        Lock(
            bucket_name="locks",
            path=f"{name}-{i}",
            ttl=5.0,
            refresh_interval=0.01,
            logger=quiet,
        )
        for i in range(16)
    ]
    for lock in locks:
        assert lock.acquire(timeout=10)
    try:
        hung = 0
        for _ in range(2000):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    # Any call hands queued records over: it takes the queue.
                    locks[0].owned_according_to_internal_state()
                    code = 0
                finally:
                    os._exit(code)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    assert os.waitstatus_to_exitcode(status) == 0
                    break
                time.sleep(0.001)
            else:
                hung += 1
                os.kill(pid, 9)
                os.waitpid(pid, 0)
        assert hung == 0, f"{hung} of 2000 children hung on the log queue"
    finally:
        for lock in locks:
            lock.release()
