"""Five redis-servers and quorum worker processes for the quorum tests."""

import json
import subprocess
import sys
import time
from pathlib import Path

from conftest import RedisServer

WORKER = Path(__file__).resolve().parent / "workers" / "quorum_worker.py"


class Nodes:
    """`count` private redis-servers, each stoppable on its own."""

    def __init__(self, directory: Path, count: int = 5):
        self.servers = []
        for i in range(count):
            node_dir = directory / f"node{i}"
            node_dir.mkdir()
            self.servers.append(RedisServer(node_dir))

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.servers]

    def stop(self, *indexes: int) -> None:
        for index in indexes:
            if self.servers[index].process.poll() is None:
                self.servers[index].stop()

    def stop_all(self) -> None:
        self.stop(*range(len(self.servers)))

    def clients(self) -> list[int]:
        """Open client connections per live node, not counting the asker."""
        return [
            len(server.cli("CLIENT", "LIST").splitlines()) - 1
            for server in self.servers
            if server.process.poll() is None
        ]


class QuorumWorker:
    """One quorum_worker.py process; `records()` waits for it to finish."""

    def __init__(self, urls: list[str], name: str, mode: str, **options: object):
        args = [sys.executable, str(WORKER), ",".join(urls), name, "--mode", mode]
        for option, value in options.items():
            args += [f"--{option}", str(value)]
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def next_record(self) -> dict:
        line = self.process.stdout.readline()
        assert line, f"worker exited: {self.process.stderr.read()}"
        return json.loads(line)

    def records(self, timeout: float = 60.0) -> list[dict]:
        out, err = self.process.communicate(timeout=timeout)
        assert self.process.returncode == 0, err
        return [json.loads(line) for line in out.splitlines()]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()


def spans(workers: list[QuorumWorker]) -> list[dict]:
    return [r for w in workers for r in w.records() if r["event"] == "span"]


def wait_until(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
