"""A release hands the lock straight to the longest waiting process."""

import statistics
import time

from holds import handoff_gaps_ms, in_hold_order, overlaps

WAITERS = ["py", "rb", "rb", "py", "py", "rb"]


def test_handoff_wakes_waiters_in_arrival_order(workers):
    holder = workers.start("py", "queue", "hold", hold=-1)  # until stdin closes
    holder.wait_for("acquired")
    waiters = []
    for lang in WAITERS:
        waiter = workers.start(lang, "queue", "wait", hold=0.02, timeout=30)
        waiter.wait_for("asking")
        waiters.append(waiter)
        # Arrivals well apart: each waiter is surely queued before the next asks.
        time.sleep(0.1)
    holder.close_stdin()

    holder.finish()
    holds = [r for waiter in waiters for r in waiter.finish() if r["event"] == "hold"]
    arrival_order = [
        hold["pid"] for hold in sorted(holds, key=lambda hold: hold["asked"])
    ]
    service_order = [hold["pid"] for hold in in_hold_order(holds)]
    assert service_order == arrival_order
    assert overlaps(holds) == []
    # A direct handoff, not a poll: the next waiter runs within milliseconds.
    gaps = handoff_gaps_ms(holds)
    assert statistics.median(gaps) < 20, gaps
    assert max(gaps) < 200, gaps
