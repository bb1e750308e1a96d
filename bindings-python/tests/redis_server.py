"""A private redis-server for one test, and just enough of a client to look
at what the library left behind; the package itself has no dependencies."""

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
    """A client for the checks the tests make (DBSIZE, KEYS, CLIENT PAUSE)."""

    def __init__(self, port: int, process: subprocess.Popen[bytes]) -> None:
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.process = process

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

    def dbsize(self) -> int:
        size = self.command("DBSIZE")
        assert isinstance(size, int)
        return size

    def keys(self) -> list[str]:
        keys = self.command("KEYS", "*")
        assert isinstance(keys, list)
        return sorted(keys)


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


def start_redis(directory: Path) -> Redis:
    """Starts redis-server on a free port, in `directory`, without persistence."""
    port = free_port()
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
        ],
        stdout=subprocess.DEVNULL,
    )
    server = Redis(port, process)
    deadline = time.monotonic() + 10
    while True:
        try:
            if server.command("PING") == "PONG":
                return server
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                server.stop()
                raise RuntimeError(
                    f"redis-server did not start on port {port}"
                ) from None
            time.sleep(0.02)
