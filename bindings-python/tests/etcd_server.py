"""A private etcd member for one test (Debian's etcd-server), on loopback
ports below the ephemeral range, and etcdctl to look at what the library
left behind."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
from pathlib import Path


def low_port() -> int:
    """A free port below the ephemeral range (32768-)."""
    while True:
        port = random.randint(20000, 29999)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


class Etcd:
    """One etcd member in `directory`; gone after `stop()`."""

    def __init__(self, directory: Path) -> None:
        # A port picked free may be taken by the time etcd binds it (ports
        # are picked at random, by every test process alike): a member that
        # exits, or is not healthy within 20 s, is started again on new
        # ports, and what it printed goes into the error if none starts.
        failures = []
        for attempt in range(3):
            if self._start(directory / f"etcd-{attempt}"):
                return
            failures.append(self._log.read_text(errors="replace")[-2000:])
        raise RuntimeError("etcd did not start:\n" + "\n---\n".join(failures))

    def _start(self, directory: Path) -> bool:
        directory.mkdir(parents=True)
        self.port = low_port()
        peer = low_port()
        while peer == self.port:
            peer = low_port()
        self.url = f"etcd://127.0.0.1:{self.port}"
        client, peer_url = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{peer}"
        self._log = directory / "etcd.log"
        with open(self._log, "w") as log:
            self.process = subprocess.Popen(
                [
                    "etcd",
                    "--name",
                    "solo",
                    "--data-dir",
                    str(directory / "data"),
                    "--listen-client-urls",
                    client,
                    "--advertise-client-urls",
                    client,
                    "--listen-peer-urls",
                    peer_url,
                    "--initial-advertise-peer-urls",
                    peer_url,
                    "--initial-cluster",
                    f"solo={peer_url}",
                    "--heartbeat-interval",
                    "50",
                    "--election-timeout",
                    "500",
                    "--log-level",
                    "error",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + 20
        while self.ctl("endpoint", "health", check=False).returncode != 0:
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                return False
            time.sleep(0.05)
        return True

    def ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "etcdctl",
                "--endpoints",
                f"127.0.0.1:{self.port}",
                "--command-timeout",
                "2s",
                *args,
            ],
            capture_output=True,
            text=True,
            check=check,
            env={**os.environ, "ETCDCTL_API": "3"},
        )

    def keys(self) -> list[str]:
        """Every key lockyard keeps, sorted."""
        out = self.ctl("get", "--prefix", "lockyard/", "--keys-only").stdout
        return sorted(line for line in out.splitlines() if line)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
