"""The shape of `lockyard.quorum.RwLock`, its context managers and errors,
on five private redis-servers."""

from __future__ import annotations

import _thread
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import lockyard
import pytest
from lockyard.quorum import RwLock
from redis_server import Redis


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Redis]]:
    started = []
    try:
        for i in range(5):
            directory = tmp_path / f"node{i}"
            directory.mkdir()
            started.append(Redis(directory))
        yield started
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def urls(servers: list[Redis]) -> list[str]:
    return [server.url for server in servers]


def in_thread(call: object) -> object:
    """Runs `call()` on another thread (another holder) and returns its result."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(call()))  # type: ignore[operator]
    thread.start()
    thread.join()
    return result[0]


def test_rw_lock_lives_in_lockyard_quorum() -> None:
    assert RwLock.__name__ == "RwLock"
    assert RwLock.__module__ == "lockyard.quorum"
    assert RwLock.__text_signature__ == (
        "(urls, name, ttl=30.0, timeout=None, *, refresh_interval=None,"
        " max_refresh_fails=3, connect_timeout=5.0)"
    )


def test_with_write_excludes_everyone_and_releases_after(
    urls: list[str], name: str
) -> None:
    lock = RwLock(urls, name, ttl=5.0)
    assert lock.nodes == urls
    with lock.write() as entered:
        assert entered is lock
        assert lock.healthy
        lock.check_health()
        token = lock.fencing_token
        assert isinstance(token, int) and token > 0
        assert lock.fencing_token == token
        assert in_thread(lambda: lock.acquire_write(0)) is False
        assert in_thread(lambda: lock.acquire_read(0)) is False
    assert not lock.healthy
    assert lock.fencing_token is None
    assert lock.acquire_write(0)
    second = lock.fencing_token
    assert second is not None and second > token
    lock.release()


def test_readers_share_and_have_no_fencing_token(urls: list[str], name: str) -> None:
    lock = RwLock(urls, name, ttl=5.0)
    with lock.read():
        assert lock.fencing_token is None

        def read_too() -> bool:
            got = lock.acquire_read(0)
            lock.release()
            return got

        assert in_thread(read_too) is True
        assert in_thread(lambda: lock.acquire_write(0)) is False


def test_with_raises_timeout_error_after_the_constructors_timeout(
    urls: list[str], name: str
) -> None:
    holder = RwLock(urls, name, ttl=5.0)
    waiter = RwLock(urls, name, ttl=5.0, timeout=0.3)
    assert holder.acquire_read()
    started = time.monotonic()
    with pytest.raises(lockyard.TimeoutError), waiter.write():
        pass
    assert 0.3 <= time.monotonic() - started < 1.5
    assert waiter.acquire_write(0.2) is False
    holder.release()


def test_an_exception_in_the_block_releases(urls: list[str], name: str) -> None:
    lock = RwLock(urls, name, ttl=5.0)
    with pytest.raises(KeyError), lock.write():
        raise KeyError("boom")
    assert lock.acquire_write(0)
    lock.release()


def test_misuse_raises_typed_errors(urls: list[str], name: str) -> None:
    lock = RwLock(urls, name, ttl=5.0)
    with pytest.raises(lockyard.NotLockedError):
        lock.release()
    with pytest.raises(lockyard.NotLockedError):
        lock.check_health()
    with lock.read(), pytest.raises(lockyard.AlreadyLockedError):
        lock.acquire_write(0)


@pytest.mark.parametrize(
    "bad_urls",
    [
        [],
        [f"redis://127.0.0.1:{7000 + i}" for i in range(33)],
        ["redis://127.0.0.1:7001", "redis://127.0.0.1:7001/0"],
        ["redis://127.0.0.1:7001", "nonsense"],
        "redis://127.0.0.1:7001",
        [7001],
    ],
)
def test_bad_node_lists_are_config_errors(bad_urls: object) -> None:
    with pytest.raises(lockyard.ConfigError):
        RwLock(bad_urls, "x")  # type: ignore[arg-type]


def test_a_majority_down_is_a_backend_error_naming_how_many_answered(
    servers: list[Redis], urls: list[str], name: str
) -> None:
    lock = RwLock(urls, name, ttl=5.0)
    lock.acquire_write()  # first contact with every node up
    lock.release()
    for server in servers[:3]:
        server.stop()
    # A try-once reports it at once; a wait retries (nodes may be
    # restarting) until its timeout, then reports the same.
    for timeout, within in [(0.0, 2.0), (1.0, 3.0)]:
        started = time.monotonic()
        with pytest.raises(lockyard.BackendError, match="only 2 of 5 nodes answered"):
            lock.acquire_write(timeout)
        assert timeout <= time.monotonic() - started < within


def test_ctrl_c_interrupts_a_wait_and_leaves_nothing_held(
    urls: list[str], name: str
) -> None:
    holder = RwLock(urls, name, ttl=5.0)
    waiter = RwLock(urls, name, ttl=5.0)
    assert in_thread(lambda: holder.acquire_write(0)) is True
    threading.Timer(0.3, _thread.interrupt_main).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        waiter.acquire_read()
    assert time.monotonic() - started < 1.0
    assert not waiter.healthy
