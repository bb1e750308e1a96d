"""A lock leaves nothing behind in Redis but its fencing counter, which
expires too."""

import signal
import time

FENCE_ONLY = ["lockyard:{tidy}:fence"]


def test_nothing_is_left_in_redis(workers, redis_server, tmp_path):
    counter = tmp_path / "counter"
    counter.write_text("0")
    holder = workers.start("rb", "tidy", "hold", hold=-1)  # until stdin closes
    holder.wait_for("acquired")
    # While it holds: waiters that give up and probes that fail.
    gave_up = [
        workers.start(lang, "tidy", "wait", timeout=0.5) for lang in ("py", "rb")
    ]
    probes = [workers.start(lang, "tidy", "probe", hold=0.5) for lang in ("py", "rb")]
    for worker in gave_up + probes:
        worker.finish()
    holder.close_stdin()
    holder.finish()
    assert all(worker.events("timeout") for worker in gave_up)
    assert not any(worker.events("acquired") for worker in probes)
    # Then a crowd of holders.
    crowd = [
        workers.start(lang, "tidy", "count", threads=2, iterations=5, counter=counter)
        for lang in ("py", "rb", "py", "rb")
    ]
    for worker in crowd:
        worker.finish()
    assert int(counter.read_text()) == 40

    assert redis_server.keys() == FENCE_ONLY
    assert int(redis_server.cli("PTTL", FENCE_ONLY[0])) > 0


def test_crashed_holders_and_waiters_leave_nothing_after_their_leases(
    workers, redis_server
):
    ttl = 1.0
    holder = workers.start("py", "tidy", "hold", ttl=ttl, hold=60)
    holder.wait_for("acquired")
    waiters = [
        workers.start(lang, "tidy", "wait", ttl=ttl, hold=60) for lang in ("py", "rb")
    ]
    for waiter in waiters:
        waiter.wait_for("asking")
    time.sleep(0.2)
    for worker in [holder, *waiters]:
        worker.signal(signal.SIGKILL)
    assert len(redis_server.keys()) > 1

    # Holder leases run out after ttl, waiter leases after 2 s; then at
    # most one handed-over grant lasts one more ttl.
    deadline = time.monotonic() + 2.0 + 2 * ttl + 1.0
    while redis_server.keys() != FENCE_ONLY and time.monotonic() < deadline:
        time.sleep(0.1)
    assert redis_server.keys() == FENCE_ONLY
    assert int(redis_server.cli("PTTL", FENCE_ONLY[0])) > 0
