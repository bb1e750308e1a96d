"""A network gone silent (connections open, no byte passing) holds a wait
no longer than its timeout, and Ctrl-C ends it at once; on a slow one, a
wait that gives up leaves nothing queued behind it."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from lockyard.redis import Lock, WaitGroup
from redis_server import Redis


class SilentProxy:
    """A TCP proxy to `upstream_port` that holds every chunk for `delay`
    seconds, and can swallow every byte, of the connections open now and
    later."""

    def __init__(self, upstream_port: int, delay: float = 0.0) -> None:
        self._delay = delay
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._upstream_port = upstream_port
        self._silent = False
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def silence(self) -> None:
        self._silent = True

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self._upstream_port))
            except OSError:
                return
            self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(source, sink), daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(16384):
                time.sleep(self._delay)
                if not self._silent:
                    sink.sendall(chunk)
        except OSError:
            pass


@pytest.fixture
def proxy(redis: Redis) -> Iterator[SilentProxy]:
    proxy = SilentProxy(redis.port)
    yield proxy
    proxy.close()


def test_an_acquire_ends_at_its_timeout_on_a_silent_network(
    proxy: SilentProxy, name: str
) -> None:
    lock = Lock(proxy.url, name, ttl=20)
    with lock:  # a pooled connection, which the silence then meets
        pass
    proxy.silence()
    started = time.monotonic()
    assert lock.acquire(timeout=1.0) is False
    assert 0.95 <= time.monotonic() - started < 1.6


def test_a_wait_group_add_ends_at_its_timeout_on_a_silent_network(
    proxy: SilentProxy, name: str
) -> None:
    group = WaitGroup(proxy.url, name, 2)
    assert group.wait(timeout=1.0) is True
    proxy.silence()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        group.add(timeout=1.0)
    assert time.monotonic() - started < 1.6


WAIT_ON_SILENCE = """
    import sys
    from lockyard.redis import Lock

    lock = Lock(sys.argv[1], sys.argv[2], ttl=20)
    with lock:
        pass
    print("ready", flush=True)
    sys.stdin.readline()
    print("waiting", flush=True)
    lock.acquire()
"""


def test_ctrl_c_ends_a_wait_on_a_silent_network_at_once(
    proxy: SilentProxy, name: str, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    child = spawn(WAIT_ON_SILENCE, proxy.url, name)
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline() == "ready\n"
    proxy.silence()
    child.stdin.write("\n")
    child.stdin.flush()
    assert child.stdout.readline() == "waiting\n"
    time.sleep(0.5)  # blocked in the read of a request nobody answers

    interrupted_at = time.monotonic()
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=15)
    assert time.monotonic() - interrupted_at < 1.0
    assert stderr.rstrip().endswith("KeyboardInterrupt"), stderr


EXCLUSIVE_ON_SILENCE = """
    import os
    import sys
    from lockyard.redis import Session, exclusive

    url, name = sys.argv[1], sys.argv[2]
    session = Session(url, ttl=20)
    for _ in exclusive(url, [name + "-first"], session=session):
        pass  # a pooled connection, which the silence then meets
    print("ready", flush=True)
    sys.stdin.readline()
    print("trying", flush=True)
    try:
        for _ in exclusive(url, [name], session=session):
            pass
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    # Destroying the session at exit would wait on the silent network.
    os._exit(0)
"""


def test_ctrl_c_ends_an_exclusive_try_on_a_silent_network_at_once(
    proxy: SilentProxy, name: str, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    child = spawn(EXCLUSIVE_ON_SILENCE, proxy.url, name)
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline() == "ready\n"
    proxy.silence()
    child.stdin.write("\n")
    child.stdin.flush()
    assert child.stdout.readline() == "trying\n"
    time.sleep(0.5)  # blocked in the read of a try nobody answers

    interrupted_at = time.monotonic()
    child.send_signal(signal.SIGINT)
    line = child.stdout.readline()
    # Like a lock's wait, not after the 10 s command timeout.
    assert time.monotonic() - interrupted_at < 1.0
    assert line == "interrupted\n"


def test_a_wait_that_gives_up_on_a_slow_network_leaves_no_place_behind(
    redis: Redis, name: str
) -> None:
    slow = SilentProxy(redis.port, delay=0.1)
    try:
        far = Lock(slow.url, name)
        assert far.acquire(timeout=3.0)  # free: granted across the slow link
        far.release()
        holder, near = Lock(redis.url, name), Lock(redis.url, name)
        holder.acquire()
        started = time.monotonic()
        assert far.acquire(timeout=0.15) is False
        # its timeout, plus a few of the link's 200 ms round trips
        assert time.monotonic() - started < 1.5
        time.sleep(1.0)  # its place is given back within a round trip or two
        holder.release()
        started = time.monotonic()
        assert near.acquire(timeout=5.0)
        assert time.monotonic() - started < 0.5
        near.release()
    finally:
        slow.close()
