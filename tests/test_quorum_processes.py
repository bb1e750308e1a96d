"""The quorum RwLock across processes on five redis-servers: writers
exclude each other and readers, readers share, a minority of nodes dying
changes nothing, a majority dying fails cleanly, a SIGKILLed holder's lock
comes back after its TTL."""

import threading
import time

import lockyard
import pytest
from lockyard.quorum import RwLock
from quorum_support import Nodes, QuorumWorker, spans


@pytest.fixture
def nodes(tmp_path):
    started = Nodes(tmp_path)
    yield started
    started.stop_all()


def count_with_writers(nodes, tmp_path, name, processes=4, iterations=15):
    counter = tmp_path / "counter"
    counter.write_text("0")
    workers = [
        QuorumWorker(
            nodes.urls,
            name,
            "count",
            iterations=iterations,
            hold=0.001,
            counter=counter,
        )
        for _ in range(processes)
    ]
    for worker in workers:
        worker.records()
    return int(counter.read_text())


def test_writers_in_separate_processes_lose_no_update(nodes, tmp_path):
    assert count_with_writers(nodes, tmp_path, "counter") == 60


def test_readers_overlap_and_never_overlap_a_writer(nodes):
    readers = [
        QuorumWorker(nodes.urls, "shared", "read", iterations=6, hold=0.1)
        for _ in range(4)
    ]
    writers = [
        QuorumWorker(nodes.urls, "shared", "write", iterations=4, hold=0.05)
        for _ in range(2)
    ]
    everything = spans(readers + writers)
    reads = [s for s in everything if s["mode"] == "read"]
    writes = [s for s in everything if s["mode"] == "write"]
    assert len(reads) == 24 and len(writes) == 8

    def overlap(a, b):
        return a["start"] < b["end"] and b["start"] < a["end"]

    assert any(overlap(a, b) for i, a in enumerate(reads) for b in reads[i + 1 :]), (
        "readers never held the lock at the same time"
    )
    for write in writes:
        clashes = [s for s in everything if s is not write and overlap(s, write)]
        assert not clashes, f"{write} overlapped {clashes}"


def test_two_of_five_nodes_dying_mid_run_changes_nothing(nodes, tmp_path):
    killer = threading.Timer(0.5, nodes.stop, args=(0, 3))
    killer.start()
    try:
        assert count_with_writers(nodes, tmp_path, "two-die", iterations=25) == 100
    finally:
        killer.join()
    assert len(nodes.clients()) == 3


def test_three_of_five_down_makes_acquire_fail_cleanly(nodes):
    lock = RwLock(nodes.urls, "three-die", ttl=5.0, timeout=3.0)
    nodes.stop(1, 2, 4)
    # A try-once reports it at once; a wait retries (the nodes may be
    # restarting) until its timeout, then reports the same.
    for acquire in (lock.acquire_write, lock.acquire_read):
        for timeout, within in [(0.0, 1.0), (1.0, 3.0)]:
            started = time.monotonic()
            with pytest.raises(lockyard.BackendError, match="only 2 of 5 nodes answered"):
                acquire(timeout)
            assert timeout <= time.monotonic() - started < within
    with pytest.raises(lockyard.NotLockedError):
        lock.release()


def test_a_sigkilled_holder_is_recovered_after_ttl(nodes):
    ttl = 1.5
    holder = QuorumWorker(nodes.urls, "crash", "hold", ttl=ttl)
    acquired = holder.next_record()
    assert acquired["event"] == "acquired"
    time.sleep(0.3)
    holder.kill()
    killed = time.monotonic_ns()
    taker = QuorumWorker(nodes.urls, "crash", "wait", ttl=ttl, timeout=10)
    (hold,) = [r for r in taker.records() if r["event"] == "hold"]
    free_after = (hold["acquired"] - killed) / 1e9
    # Refreshed every ttl/9: the lease may end that much before ttl.
    assert ttl - ttl / 9 - 0.1 <= free_after <= ttl + 1.0
    assert hold["fence"] > acquired["fence"]
