"""Threads sharing one Lock exclude each other like separate machines, and
a waiting thread never holds up the rest of the interpreter."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from lockyard.redis import Lock
from redis_server import Redis


def test_threads_sharing_one_lock_lose_no_update(
    url: str, name: str, tmp_path: Path
) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    lock = Lock(url, name, ttl=10.0)

    def add_fifty() -> None:
        for _ in range(50):
            with lock:
                value = int(counter.read_text())
                time.sleep(0)  # invite another thread in, if the lock would let it
                counter.write_text(str(value + 1))

    threads = [threading.Thread(target=add_fifty) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counter.read_text() == "400"
    assert not lock.locked()


def test_fencing_tokens_strictly_increase_across_holders(url: str, name: str) -> None:
    tokens: list[int] = []
    tokens_lock = threading.Lock()

    def hold_three_times() -> None:
        lock = Lock(url, name)  # a separate object per thread: like separate hosts
        for _ in range(3):
            with lock:
                token = lock.fencing_token
                assert token is not None
                with tokens_lock:
                    tokens.append(token)

    threads = [threading.Thread(target=hold_three_times) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(tokens) == 12
    assert tokens == sorted(set(tokens)), "grant order must be token order"


def test_acquire_with_timeout_gives_up_and_leaves_nothing_queued(
    redis: Redis, name: str, eventually: Callable[..., bool]
) -> None:
    holder = Lock(redis.url, name)
    waiter = Lock(redis.url, name)
    holder.acquire()
    started = time.monotonic()
    assert waiter.acquire(timeout=0.2) is False
    assert 0.2 <= time.monotonic() - started < 1.5
    assert waiter.try_acquire() is False
    holder.release()
    fence_only = [f"lockyard:{{{name}}}:fence"]
    assert eventually(lambda: redis.keys() == fence_only), redis.keys()
    assert waiter.try_acquire() is True
    waiter.release()


def test_a_waiting_thread_does_not_block_other_python_threads(
    url: str, name: str
) -> None:
    lock = Lock(url, name)
    lock.acquire()
    outcome: list[bool] = []
    waiter = threading.Thread(target=lambda: outcome.append(lock.acquire(timeout=1.0)))
    waiter.start()
    counted = 0
    started = time.monotonic()
    while waiter.is_alive():  # pure Python work: needs the GIL the waiter must not hold
        counted += 1
    assert time.monotonic() - started >= 0.9
    assert outcome == [False]
    assert counted > 100_000
    lock.release()


def test_a_release_hands_the_lock_to_a_waiting_thread(url: str, name: str) -> None:
    lock = Lock(url, name)
    lock.acquire()
    acquired = threading.Event()

    def wait_for_it() -> None:
        with lock:
            acquired.set()

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    time.sleep(0.2)
    assert not acquired.is_set()
    lock.release()
    assert acquired.wait(timeout=2.0)
    waiter.join()
