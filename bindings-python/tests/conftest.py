"""Fixtures: a private redis-server per test, GCS test servers, unique lock
names, and user scripts run in separate Python processes."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from etcd_server import Etcd
from gcs_servers import GcsServer, start_faithful_gcs, start_fake_gcs
from redis_server import Redis

# A shell without job control starts background jobs with SIGINT ignored;
# Python then installs no handler, `_thread.interrupt_main()` does nothing
# and spawned children inherit the ignored signal: the Ctrl-C tests would
# hang. Run as from a terminal, wherever started.
signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[Redis]:
    """A fresh redis-server without persistence, killed after the test."""
    server = Redis(tmp_path)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def gcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[GcsServer]:
    """The faithful GCS test server, fresh per test, as STORAGE_EMULATOR_HOST."""
    server = start_faithful_gcs()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.host)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def fake_gcs() -> Iterator[GcsServer]:
    """fake-gcs-server, shared by a module's tests (each sets the host)."""
    server = start_fake_gcs()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    """A private etcd member (Debian's etcd-server), killed after the test."""
    server = Etcd(tmp_path)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def url(redis: Redis) -> str:
    return redis.url


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A lock name per test, so a failure message says which test it was."""
    return re.sub(r"[^\w.-]+", "-", request.node.name)


Spawn = Callable[..., "subprocess.Popen[str]"]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Runs a user's script in a new Python process (`sys.argv[1:]` are the
    extra arguments) with line-buffered text pipes; kills what is left of
    it after the test."""
    children: list[subprocess.Popen[str]] = []

    def run(code: str, *args: str) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        children.append(child)
        return child

    yield run
    for child in children:
        if child.poll() is None:
            child.kill()
        # A grandchild the script forked may hold its pipes open.
        try:
            child.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            for pipe in (child.stdin, child.stdout, child.stderr):
                if pipe is not None:
                    pipe.close()


def eventually(condition: Callable[[], object], timeout: float = 5.0) -> bool:
    """Polls `condition()` until it is true or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture(name="eventually")
def eventually_fixture() -> Callable[..., bool]:
    return eventually
