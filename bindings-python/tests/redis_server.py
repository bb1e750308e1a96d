"""A private redis-server for one test, and just enough of a client to look
at what the library left behind; the package itself has no dependencies.

The one server helper of every Python test: the binding tests here, the
cross-language tests (tests/conftest.py) and the README runner
(scripts/readme_examples.py) import it; it ships in the sdist with the
binding tests."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import BinaryIO


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Redis:
    """A redis-server on a free port, in `directory`, without persistence;
    gone after `stop()`. Its client makes the checks the tests make (DBSIZE,
    KEYS, CLIENT PAUSE)."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._launch(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(directory),
            ]
        )

    def _launch(self, command: list[str]) -> None:
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.command("PING") == "PONG":
                    return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError(
                        f"redis-server did not start on port {self.port}"
                    ) from None
                time.sleep(0.02)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()

    def command(self, *args: str | int) -> object:
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            parts = [str(a).encode() for a in args]
            request = b"*%d\r\n" % len(parts)
            for part in parts:
                request += b"$%d\r\n%s\r\n" % (len(part), part)
            sock.sendall(request)
            return _read_reply(sock.makefile("rb"))

    def forget_holders(self, name: str) -> None:
        """Deletes the records of who holds `name` behind its holders' back
        (FLUSHALL, say): the holders key (a set, or a sole holder's short
        form) and the name's shape."""
        self.command("DEL", f"lockyard:{{{name}}}:holders", f"lockyard:{{{name}}}:shape")

    def dbsize(self) -> int:
        size = self.command("DBSIZE")
        assert isinstance(size, int)
        return size

    def keys(self) -> list[str]:
        keys = self.command("KEYS", "*")
        assert isinstance(keys, list)
        return sorted(keys)


class Sentinel(Redis):
    """A sentinel (`redis-server --sentinel`) on a free port, watching
    `master` under the name `master_name`."""

    def __init__(self, directory: Path, master: Redis, master_name: str) -> None:
        self.port = free_port()
        self.url = f"redis+sentinel://127.0.0.1:{self.port}/{master_name}/0"
        config = directory / f"sentinel-{self.port}.conf"
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {directory}\n"
            f"sentinel monitor {master_name} 127.0.0.1 {master.port} 1\n"
        )
        self._launch(["redis-server", str(config), "--sentinel"])


def _read_reply(reply: BinaryIO) -> object:
    line = reply.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        return None if size < 0 else reply.read(size + 2)[:-2].decode()
    if kind == b"*":
        return [_read_reply(reply) for _ in range(int(rest))]
    raise RuntimeError(f"unexpected reply {line!r}")
