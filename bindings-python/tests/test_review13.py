"""Review 13 (d694693: every quorum round request, and the background
retry of a release, is work an exiting process waits for, up to 10 s).

FINDING: a Python program that uses a quorum RwLock while one of its three
nodes does not answer (SIGSTOPped: a hung host or a partition, which a
quorum of 2 out of 3 is there to ride out) takes 10 s to exit. The acquire
request to the silent node waits out its request timeout (5 s by default),
its undo release to the same silent node another 5 s, and the exit waits
for both (`runtime::Background` in `Round::start`), though neither can
reach the node. A holder whose node goes silent while it holds waits the
same 10 s: `retry_release` (now `spawn_awaited`) retries until the lease
ends. Before d694693 the program exited at once. Mirrors
core/tests/review13.rs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lockyard.quorum import RwLock as SyncRwLock
from redis_server import Redis

Spawn = Callable[..., "subprocess.Popen[str]"]


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Redis]]:
    started = []
    try:
        for i in range(3):
            directory = tmp_path / f"node{i}"
            directory.mkdir()
            started.append(Redis(directory))
        yield started
    finally:
        for server in started:
            os.kill(server.process.pid, signal.SIGCONT)
            server.stop()


USE_THEN_EXIT = """
    import sys
    from lockyard.quorum import RwLock

    urls, name = sys.argv[1].split(","), sys.argv[2]
    lock = RwLock(urls, name)
    assert lock.acquire_write(5)
    lock.release()
    print("released", flush=True)
"""


def test_a_program_that_used_a_quorum_lock_with_one_silent_node_exits_at_once(
    servers: list[Redis], name: str, spawn: Spawn
) -> None:
    urls = [s.url for s in servers]
    # First contact with every node up: their restart guards end.
    warm = SyncRwLock(urls, name)
    assert warm.acquire_write(5)
    warm.release()
    os.kill(servers[2].process.pid, signal.SIGSTOP)
    child = spawn(USE_THEN_EXIT, ",".join(urls), name)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "released", child.communicate(timeout=30)
    released = time.monotonic()
    child.communicate(timeout=30)
    took = time.monotonic() - released
    assert child.returncode == 0
    assert took < 3, f"the program took {took:.1f} s to exit after releasing its lock"
