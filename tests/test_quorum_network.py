"""The quorum RwLock's fan-out on a bad network: a node behind a slow link
does not slow the lock, timeouts and interrupted waits leave no connection
or grant behind, and nodes that deny a busy lock are never taken for nodes
that are down."""

import _thread
import socket
import threading
import time

import pytest
from lockyard.quorum import RwLock
from quorum_support import Nodes, wait_until


class DelayProxy:
    """A TCP proxy to `port` that holds every chunk for `delay` seconds."""

    def __init__(self, port: int, delay: float):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        self.port, self.delay = port, delay
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.port))
            except OSError:  # the node behind the proxy is down: so is the proxy
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                time.sleep(self.delay)
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            target.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def nodes(tmp_path):
    started = Nodes(tmp_path)
    yield started
    started.stop_all()


def median_cycle(lock: RwLock, cycles: int = 40) -> float:
    times = []
    for _ in range(cycles):
        started = time.perf_counter()
        with lock.write():
            pass
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def test_a_node_behind_a_slow_link_does_not_slow_the_lock(nodes):
    delay = 0.2
    proxy = DelayProxy(nodes.servers[0].port, delay)
    try:
        direct = median_cycle(RwLock(nodes.urls, "direct", ttl=5.0))
        urls = [proxy.url, *nodes.urls[1:]]
        slowed = median_cycle(RwLock(urls, "slowed", ttl=5.0))
    finally:
        proxy.close()
    assert slowed < delay / 4, f"{slowed * 1e3:.1f} ms per cycle behind a {delay}s link"
    assert slowed < direct * 5 + 0.005


def test_timeouts_and_interrupts_leave_no_connection_or_grant_behind(nodes):
    holder = RwLock(nodes.urls, "leak", ttl=5.0)
    waiter = RwLock(nodes.urls, "leak", ttl=5.0)
    assert holder.acquire_write(1)
    holder.release()
    assert waiter.acquire_read(1)
    waiter.release()
    baseline = nodes.clients()

    release = threading.Event()

    def hold_in_thread() -> None:
        assert holder.acquire_write(1)
        release.wait()
        holder.release()

    thread = threading.Thread(target=hold_in_thread)
    thread.start()
    time.sleep(0.2)
    for _ in range(10):
        assert waiter.acquire_write(0.05) is False
        assert waiter.acquire_read(0.05) is False
    for _ in range(3):
        threading.Timer(0.1, _thread.interrupt_main).start()
        with pytest.raises(KeyboardInterrupt):
            waiter.acquire_read()
    nodes.stop(4)
    for _ in range(5):
        assert waiter.acquire_write(0.05) is False
    assert nodes.clients() == baseline[:4]
    release.set()
    thread.join()
    # Left: the fencing counter, the restart guard, and the node list that
    # expires with the last grant.
    kept = (":fence", ":alive", ":nodes")
    assert wait_until(
        lambda: all(
            all(key.endswith(kept) for key in server.keys("lockyard:*"))
            for server in nodes.servers[:4]
        )
    )


def test_a_busy_lock_on_two_nodes_times_out_or_waits_instead_of_failing(tmp_path):
    # Two nodes: a write needs both, so one "no" rules it out while only one
    # node has answered. That is a busy lock, not a BackendError.
    nodes = Nodes(tmp_path, count=2)
    try:
        holder = RwLock(nodes.urls, "busy", ttl=5.0)
        waiter = RwLock(nodes.urls, "busy", ttl=5.0)
        assert holder.acquire_write(1)
        for timeout in (0, 0.1, 0, 0.1, 0):
            assert waiter.acquire_write(timeout) is False
            assert waiter.acquire_read(timeout) is False

        outcome = []

        def write_without_timeout() -> None:
            try:
                with waiter.write():
                    outcome.append("written")
            except Exception as error:  # noqa: BLE001 - the test reports it
                outcome.append(error)

        thread = threading.Thread(target=write_without_timeout)
        thread.start()
        time.sleep(0.5)
        assert outcome == []
        holder.release()
        thread.join(5)
        assert outcome == ["written"]
    finally:
        nodes.stop_all()
