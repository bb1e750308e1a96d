"""Fixtures for the cross-language tests: a private redis-server per test, and
worker processes (tests/workers/worker.py and worker.rb) whose JSON-line
reports the tests assert on.

Which interpreter and which build each worker uses: tests/workers/commands.py.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "workers"))
# The test-server helpers shared with the binding tests (redis_server,
# gcs_servers); appended, so a name of this folder's wins (conftest).
sys.path.append(str(HERE.parent / "bindings-python" / "tests"))

from commands import worker_command
from etcd_server import Etcd
from redis_server import Redis


class RedisServer(Redis):
    """A redis-server of our own (no persistence, gone after the test),
    looked at with redis-cli: unlike `Redis.command` it answers "" instead
    of raising while the server is down (a restart test polls PING through
    it), and `keys` lists only lockyard's."""

    def cli(self, *args: str) -> str:
        result = subprocess.run(
            ["redis-cli", "-p", str(self.port), *args],
            check=False,
            capture_output=True,
            text=True,
        )
        return result.stdout.strip()

    def keys(self, pattern: str = "lockyard:*") -> list[str]:
        return sorted(self.cli("--scan", "--pattern", pattern).split())


class Worker:
    """One worker process; its JSON-line reports arrive in `records`."""

    def __init__(
        self, lang: str, args: list[str], stderr_path: Path, script: str = "worker"
    ):
        self.lang = lang
        self.stderr_path = stderr_path
        self.process = subprocess.Popen(
            [*worker_command(lang, script), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr_path.open("w"),
            text=True,
        )
        self.records: list[dict] = []
        self._arrivals: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = {"event": "garbage", "line": line}
            self.records.append(record)
            self._arrivals.put(record)
        self._arrivals.put(None)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_for(self, event: str, timeout: float = 15.0) -> dict:
        """The next report named `event` (earlier reports stay in `records`)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                record = self._arrivals.get(
                    timeout=max(0.0, deadline - time.monotonic())
                )
            except queue.Empty:
                raise AssertionError(
                    f"{self} reported no {event!r} within {timeout}s"
                ) from None
            if record is None:
                raise AssertionError(f"{self} exited before reporting {event!r}")
            if record["event"] == event:
                return record

    def finish(self, timeout: float = 60.0) -> list[dict]:
        """Waits for a clean exit and returns everything it reported."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"{self} still running after {timeout}s") from None
        self._reader.join(5)
        assert code == 0, f"{self} exited with {code}"
        return self.records

    def events(self, event: str) -> list[dict]:
        return [r for r in self.records if r["event"] == event]

    def tell(self, command: str) -> dict:
        """Sends one command line and returns the report it causes."""
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.wait_for(command)

    def close_stdin(self) -> None:
        self.process.stdin.close()

    def signal(self, signum: int) -> None:
        os.kill(self.process.pid, signum)

    def __str__(self) -> str:
        stderr = (
            self.stderr_path.read_text().strip() if self.stderr_path.exists() else ""
        )
        detail = f"; stderr:\n{stderr}" if stderr else ""
        return f"{self.lang} worker {self.process.pid}{detail}"


class Workers:
    """Starts workers against one server (Redis or etcd) and cleans up after them."""

    def __init__(self, server: RedisServer | Etcd, directory: Path):
        self.server = server
        self.directory = directory
        self.started: list[Worker] = []

    def start(self, lang: str, name: str, mode: str, **options) -> Worker:
        """A worker.py / worker.rb on the lock `name`."""
        return self._launch(lang, "worker", [name, "--mode", mode], options)

    def start_job_server(self, lang: str, server: str, **options) -> Worker:
        """A job_server.py / job_server.rb called `server` (options with
        dashes, e.g. lock_delay=1 becomes --lock-delay 1)."""
        return self._launch(lang, "job_server", [server], options)

    def start_campaigner(self, lang: str, name: str, value: str) -> Worker:
        """A campaigner.py / campaigner.rb for the election `name`."""
        return self._launch(lang, "campaigner", [name, value], {})

    def _launch(self, lang: str, script: str, args: list[str], options) -> Worker:
        args = [self.server.url, *args]
        for option, value in options.items():
            args += [f"--{option.replace('_', '-')}", str(value)]
        stderr_path = self.directory / f"worker-{len(self.started)}-{lang}.stderr"
        worker = Worker(lang, args, stderr_path, script)
        self.started.append(worker)
        return worker

    def stop_all(self) -> None:
        for worker in self.started:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGCONT)
                worker.process.kill()
                worker.process.wait()


@pytest.fixture(scope="session", autouse=True)
def bindings_are_installed() -> None:
    missing = []
    for lang, probe in [
        ("py", ["-c", "import lockyard.redis"]),
        ("rb", ["-e", 'require "lockyard"']),
    ]:
        command = [*worker_command(lang)[:-1], *probe]
        result = subprocess.run(command, check=False, capture_output=True, text=True)
        if result.returncode != 0:
            missing.append(f"{' '.join(command)}:\n{result.stderr.strip()}")
    if shutil.which("redis-server") is None:
        missing.append("redis-server is not on PATH")
    if missing:
        pytest.fail(
            "the bindings must be installed (scripts/setup):\n" + "\n".join(missing)
        )


@pytest.fixture
def redis_server(tmp_path: Path):
    server = RedisServer(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def workers(redis_server: RedisServer, tmp_path: Path):
    started = Workers(redis_server, tmp_path)
    yield started
    started.stop_all()


@pytest.fixture
def etcd_server(tmp_path: Path):
    server = Etcd(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def etcd_workers(etcd_server: Etcd, tmp_path: Path):
    """Workers whose lock is on a private etcd member."""
    started = Workers(etcd_server, tmp_path)
    yield started
    started.stop_all()
