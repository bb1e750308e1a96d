"""Holders that crash or pause: the lock comes back after its TTL, never
before, and a paused holder learns that it lost the lock."""

import signal
import time

import pytest

TTL = 2.0
# A holder refreshes every ttl/9 by default: its lease may run out up to
# that much before ttl has passed since the kill.
REFRESH_EVERY = TTL / 9


@pytest.mark.parametrize(
    ("holder_lang", "taker_lang", "taker_mode"),
    [
        ("py", "rb", "wait"),
        ("rb", "py", "wait"),
        ("py", "rb", "probe"),
        ("rb", "py", "probe"),
    ],
)
def test_sigkilled_holder_is_free_after_ttl_and_not_before(
    workers, holder_lang, taker_lang, taker_mode
):
    holder = workers.start(holder_lang, "crash", "hold", ttl=TTL, hold=60)
    acquired = holder.wait_for("acquired")
    # A blocking waiter, or a process calling try_acquire every 20 ms, both
    # already trying before the kill.
    if taker_mode == "wait":
        taker = workers.start(taker_lang, "crash", "wait", ttl=TTL, hold=0, timeout=15)
        taker.wait_for("asking")
    else:
        taker = workers.start(
            taker_lang, "crash", "probe", ttl=TTL, hold=15, iterations=1, interval=0.02
        )
        taker.wait_for("ready")
    time.sleep(0.3)  # let a refresh or two happen first
    holder.signal(signal.SIGKILL)
    killed = time.monotonic_ns()

    taken = taker.wait_for("acquired")
    taker.finish()
    if taker_mode == "probe":
        assert taken["attempts"] > 1, "try_acquire succeeded while the holder lived"

    free_after = (taken["acquired"] - killed) / 1e9
    assert free_after >= TTL - REFRESH_EVERY - 0.1, (
        "taken while the killed holder's lease was live"
    )
    assert free_after <= TTL + 0.5, (
        "the lock stayed taken long after the crashed holder's TTL"
    )
    assert taken["fence"] > acquired["fence"]


@pytest.mark.parametrize(("holder_lang", "taker_lang"), [("py", "rb"), ("rb", "py")])
def test_sigstopped_holder_is_taken_over_and_reports_unhealthy(
    workers, holder_lang, taker_lang
):
    holder = workers.start(holder_lang, "pause", "hold", ttl=1, hold=4)
    acquired = holder.wait_for("acquired")
    holder.signal(signal.SIGSTOP)
    stopped = time.monotonic_ns()

    taker = workers.start(taker_lang, "pause", "wait", ttl=1, hold=2, timeout=10)
    took_over = taker.wait_for("acquired")
    time.sleep(max(0.0, 2.5 - (time.monotonic_ns() - stopped) / 1e9))
    holder.signal(signal.SIGCONT)
    resumed = time.monotonic_ns()

    taker.finish()
    holder.finish()
    (checked,) = holder.events("checked")
    assert took_over["acquired"] < resumed, "nobody took over the paused holder's lock"
    assert took_over["fence"] > acquired["fence"]
    assert checked["at"] > resumed
    assert checked["healthy"] is False, f"{holder} still thinks it holds a lock it lost"
    assert checked["check"] == "LockUnhealthyError"
