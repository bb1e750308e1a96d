"""Python and Ruby processes sharing etcd locks: no update lost, FIFO
service, crashed holders freed after their lease and not before, paused
holders taken over and told so."""

import signal
import time
from pathlib import Path

import pytest
from holds import fence_decreases, overlaps

TTL = 2


def test_processes_in_both_languages_lose_no_update(
    etcd_workers, etcd_server, tmp_path: Path
):
    counter = tmp_path / "counter"
    counter.write_text("0")
    started = [
        etcd_workers.start(
            lang,
            "counter",
            "count",
            threads=2,
            iterations=10,
            hold=0.001,
            ttl=10,
            counter=counter,
        )
        for _ in range(2)
        for lang in ("py", "rb")
    ]
    holds = [r for worker in started for r in worker.finish() if r["event"] == "hold"]
    assert len(holds) == 80
    assert int(counter.read_text()) == 80, "an update was lost: two holders at once"
    assert overlaps(holds) == []
    assert fence_decreases(holds) == []
    assert {hold["lang"] for hold in holds} == {"py", "rb"}
    assert etcd_server.keys() == []


@pytest.mark.parametrize(("holder_lang", "taker_lang"), [("py", "rb"), ("rb", "py")])
def test_sigkilled_holder_is_free_after_its_lease_and_not_before(
    etcd_workers, holder_lang, taker_lang
):
    holder = etcd_workers.start(holder_lang, "crash", "hold", ttl=TTL, hold=60)
    acquired = holder.wait_for("acquired")
    taker = etcd_workers.start(taker_lang, "crash", "wait", ttl=TTL, hold=0, timeout=15)
    taker.wait_for("asking")
    time.sleep(0.3)
    holder.signal(signal.SIGKILL)
    killed = time.monotonic_ns()
    taken = taker.wait_for("acquired")
    taker.finish()
    free_after = (taken["acquired"] - killed) / 1e9
    # Kept alive every ttl/3: the lease may end up to that much early.
    assert free_after >= TTL - TTL / 3 - 0.1, (
        "taken while the killed holder's lease was live"
    )
    # etcd looks for expired leases every 500 ms and revokes through Raft.
    assert free_after <= TTL + 1.5, (
        "the lock stayed taken long after the holder's lease"
    )
    assert taken["fence"] > acquired["fence"]


@pytest.mark.parametrize(("holder_lang", "taker_lang"), [("py", "rb"), ("rb", "py")])
def test_sigstopped_holder_is_taken_over_and_reports_unhealthy(
    etcd_workers, holder_lang, taker_lang
):
    holder = etcd_workers.start(holder_lang, "pause", "hold", ttl=TTL, hold=5)
    acquired = holder.wait_for("acquired")
    holder.signal(signal.SIGSTOP)
    stopped = time.monotonic_ns()
    taker = etcd_workers.start(taker_lang, "pause", "wait", ttl=TTL, hold=2, timeout=15)
    took_over = taker.wait_for("acquired")
    time.sleep(max(0.0, 3.5 - (time.monotonic_ns() - stopped) / 1e9))
    holder.signal(signal.SIGCONT)
    resumed = time.monotonic_ns()
    taker.finish()
    holder.finish()
    (checked,) = holder.events("checked")
    assert took_over["acquired"] < resumed, "nobody took over the paused holder's lock"
    assert took_over["fence"] > acquired["fence"]
    assert checked["healthy"] is False, f"{holder} still thinks it holds a lock it lost"
    assert checked["check"] == "LockUnhealthyError"


def test_waiters_of_both_languages_are_served_in_arrival_order(etcd_workers):
    holder = etcd_workers.start("py", "fifo", "hold", ttl=10, hold=2)
    holder.wait_for("acquired")
    waiters = []
    for lang in ("rb", "py", "rb", "py"):
        waiter = etcd_workers.start(lang, "fifo", "wait", ttl=10, hold=0.05, timeout=30)
        waiter.wait_for("asking")
        time.sleep(0.3)  # its key is in line before the next one asks
        waiters.append(waiter)
    holder.finish()
    acquired = [waiter.wait_for("acquired")["acquired"] for waiter in waiters]
    for waiter in waiters:
        waiter.finish()
    assert acquired == sorted(acquired), "waiters were not served in arrival order"
