"""Many processes share one WaitGroup: never more than `limit` inside,
crashed and paused holders give their slots back after the TTL, a Redis
restart makes holders unhealthy, and every process gets its turn.

Workers (tests/workers/wait_group_worker.py, and its Ruby twin
wait_group_worker.rb) append JSON-line reports to a file each; the test reads
them as they come.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import lockyard
import lockyard.etcd
import pytest
from commands import WORKERS, python, ruby
from lockyard.redis import WaitGroup


def wait_group_worker_command(lang: str) -> list[str]:
    if lang == "py":
        return [*python(), str(WORKERS / "wait_group_worker.py")]
    return [*ruby(), str(WORKERS / "wait_group_worker.rb")]


class WaitGroupWorker:
    def __init__(
        self, url: str, name: str, mode: str, directory: Path, lang: str, **options
    ):
        self.lang = lang
        label = f"wait-group-{mode}-{len(list(directory.glob('*.jsonl')))}-{lang}"
        self.reports_path = directory / f"{label}.jsonl"
        self.reports_path.touch()
        self.stderr_path = directory / f"{label}.stderr"
        args = [url, name, "--mode", mode, "--reports", str(self.reports_path)]
        for option, value in options.items():
            args += [f"--{option}", str(value)]
        self.process = subprocess.Popen(
            [*wait_group_worker_command(lang), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr_path.open("w"),
            text=True,
        )

    def reports(self, event: str) -> list[dict]:
        lines = self.reports_path.read_text().splitlines()
        return [r for r in map(json.loads, lines) if r["event"] == event]

    def wait_for(self, event: str, timeout: float = 15.0) -> dict:
        """The first report named `event`, once it is there."""
        deadline = time.monotonic() + timeout
        while not (found := self.reports(event)):
            if self.process.poll() is not None and not self.reports(event):
                raise AssertionError(f"{self} exited before reporting {event!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self} reported no {event!r} in {timeout}s")
            time.sleep(0.01)
        return found[0]

    def tell(self, line: str = "go") -> None:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def finish(self, timeout: float = 30.0) -> None:
        assert self.process.wait(timeout) == 0, f"{self} failed"

    def signal(self, signum: int) -> None:
        os.kill(self.process.pid, signum)

    def __str__(self) -> str:
        stderr = self.stderr_path.read_text().strip()
        detail = f"; stderr:\n{stderr}" if stderr else ""
        return f"{self.lang} worker {self.process.pid}{detail}"


def starter(url: str, tmp_path: Path):
    """start(name, mode, lang="py", **options) runs a wait group worker on
    `url`; kills what is left of them afterwards."""
    started: list[WaitGroupWorker] = []

    def run(name: str, mode: str, lang: str = "py", **options) -> WaitGroupWorker:
        worker = WaitGroupWorker(url, name, mode, tmp_path, lang, **options)
        started.append(worker)
        return worker

    yield run
    for worker in started:
        if worker.process.poll() is None:
            worker.signal(signal.SIGCONT)
            worker.process.kill()
        worker.process.wait()


@pytest.fixture
def start(redis_server, tmp_path):
    yield from starter(redis_server.url, tmp_path)


@pytest.fixture
def etcd_start(etcd_server, tmp_path):
    yield from starter(etcd_server.url, tmp_path)


def fence_only(redis_server, name: str) -> bool:
    """Nothing of `name` left in Redis but its fencing counter, expiring."""
    fence = f"lockyard:{{{name}}}:fence"
    if redis_server.keys() != [fence]:
        return False
    return int(redis_server.cli("PTTL", fence)) > 0


def within(seconds: float, condition) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def start_crowd(start, tmp_path: Path, name: str, langs: list[str], **options):
    counter = tmp_path / f"{name}.inside"
    counter.write_text("0")
    crowd = [
        start(name, "crowd", lang, limit=LIMIT, counter=counter, **options)
        for lang in langs
    ]
    for worker in crowd:
        worker.wait_for("ready")
    for worker in crowd:
        worker.tell()
    for worker in crowd:
        worker.finish()
    return crowd


LIMIT = 3


def test_processes_never_exceed_the_limit_and_reach_it(start, redis_server, tmp_path):
    # Python and Ruby processes in one crowd, counted in by the same file.
    crowd = start_crowd(
        start, tmp_path, "quota", ["py", "rb"] * 4, iterations=20, hold=0.005, ttl=10
    )
    holds = [hold for worker in crowd for hold in worker.reports("hold")]
    assert len(holds) == 8 * 20
    most_inside = max(hold["inside"] for hold in holds)
    assert most_inside <= LIMIT, "more processes inside than the limit allows"
    assert most_inside == LIMIT, "the limit was never used in full"
    fences = [hold["fence"] for hold in holds]
    assert len(set(fences)) == len(fences), "a fencing token was granted twice"
    assert within(2.0, lambda: fence_only(redis_server, "quota")), redis_server.keys()


def test_every_process_gets_at_least_half_its_fair_share(start, redis_server, tmp_path):
    crowd = start_crowd(
        start, tmp_path, "fair", ["py"] * 8, duration=2.0, hold=0.01, ttl=10
    )
    holds = {worker.process.pid: len(worker.reports("hold")) for worker in crowd}
    fair_share = sum(holds.values()) / len(holds)
    assert fair_share >= 10, holds  # enough turns for the ratio to mean something
    assert min(holds.values()) >= fair_share / 2, holds
    assert within(2.0, lambda: fence_only(redis_server, "fair"))


TTL = 1.5
# A holder refreshes every ttl/9 by default: its lease may run out up to
# that much before ttl has passed since the kill.
REFRESH_EVERY = TTL / 9


def test_sigkilled_holders_free_their_slots_after_ttl_and_not_before(
    start, redis_server
):
    holders = [start("crash", "hold", limit=2, ttl=TTL, hold=60) for _ in range(2)]
    fences = [holder.wait_for("acquired")["fence"] for holder in holders]
    time.sleep(0.3)  # a refresh or two first
    for holder in holders:
        holder.signal(signal.SIGKILL)
    killed = time.monotonic()

    wg = WaitGroup(redis_server.url, "crash", limit=2, ttl=10)
    with pytest.raises(lockyard.TimeoutError):
        wg.add(timeout=0)
    assert wg.count() == 2
    tokens = [wg.add(timeout=5.0), wg.add(timeout=5.0)]
    free_after = time.monotonic() - killed
    assert free_after >= TTL - REFRESH_EVERY - 0.1, (
        "a slot was taken while the killed holder's lease was live"
    )
    assert free_after <= TTL + 0.5, "slots stayed taken long after the TTL"
    assert min(wg.fencing_token(token) for token in tokens) > max(fences)
    for token in tokens:
        assert wg.done(token)
    assert within(1.0, lambda: fence_only(redis_server, "crash"))


def test_sigstopped_holder_loses_its_slot_and_reports_unhealthy(start, redis_server):
    holder = start("pause", "hold", limit=1, ttl=1.0, hold=-1)
    acquired = holder.wait_for("acquired")
    holder.signal(signal.SIGSTOP)
    stopped = time.monotonic()

    wg = WaitGroup(redis_server.url, "pause", limit=1, ttl=10)
    token = wg.add(timeout=5.0)
    assert time.monotonic() - stopped < 1.5
    time.sleep(max(0.0, 2.0 - (time.monotonic() - stopped)))
    holder.signal(signal.SIGCONT)
    holder.tell("report")

    checked = holder.wait_for("checked")
    assert checked["healthy"] is False, f"{holder} still thinks it holds its slot"
    assert checked["check"] == "LockUnhealthyError"
    assert holder.wait_for("done")["freed"] is False
    assert wg.fencing_token(token) > acquired["fence"]
    assert wg.healthy(token)
    assert wg.count() == 1, "the paused holder's done() freed another's slot"
    assert wg.done(token)


def restart(redis_server) -> None:
    """Kills redis-server and starts a new, empty one on the same port."""
    redis_server.stop()
    redis_server.process = subprocess.Popen(
        redis_server.process.args, stdout=subprocess.DEVNULL
    )
    assert within(10.0, lambda: redis_server.cli("PING") == "PONG")


def test_holders_turn_unhealthy_when_redis_restarts_empty(start, redis_server):
    holders = [start("restart", "hold", limit=3, ttl=3.0, hold=-1) for _ in range(2)]
    fences = [holder.wait_for("acquired")["fence"] for holder in holders]
    restart(redis_server)
    time.sleep(1.0)  # three refresh periods: each holder finds its slot gone
    for holder in holders:
        holder.tell("report")
    for holder in holders:
        checked = holder.wait_for("checked")
        assert checked["healthy"] is False, f"{holder} trusts a slot Redis forgot"
        assert checked["check"] == "LockUnhealthyError"
        assert holder.wait_for("done")["freed"] is False
        holder.finish()

    wg = WaitGroup(redis_server.url, "restart", limit=3)
    assert wg.count() == 0
    with wg.slot() as slot:
        assert slot.fencing_token > max(fences), "fencing went backwards"


def test_done_from_another_process_frees_the_slot_and_ends_wait(start, redis_server):
    holders = [start("handoff", "hold", limit=2, ttl=TTL, hold=-1) for _ in range(2)]
    tokens = [holder.wait_for("acquired")["token"] for holder in holders]
    waiter = start("handoff", "wait", limit=2, timeout=20)
    waiter.wait_for("asking")

    freer = start("handoff", "done", limit=2, token=tokens[0])
    assert freer.wait_for("done")["freed"] is True
    time.sleep(0.5)
    assert waiter.reports("waited") == [], "wait() returned while a slot is held"
    assert WaitGroup(redis_server.url, "handoff", limit=2).count() == 1

    freer = start("handoff", "done", limit=2, token=tokens[1])
    freed_at = freer.wait_for("done")["at"]
    waited = waiter.wait_for("waited")
    assert waited["idle"] is True
    assert (waited["at"] - freed_at) / 1e6 < 100, "wait() noticed the last done late"

    # The holders learn that someone else freed their slots at their next
    # refresh.
    time.sleep(2 * REFRESH_EVERY)
    for holder in holders:
        holder.tell("report")
        assert holder.wait_for("checked")["healthy"] is False
        assert holder.wait_for("done")["freed"] is False
    assert within(2.0, lambda: fence_only(redis_server, "handoff"))


@pytest.mark.parametrize(("adder_lang", "worker_lang"), [("py", "rb"), ("rb", "py")])
def test_a_slot_handed_to_a_worker_outlives_its_adder_until_done(
    start, redis_server, adder_lang, worker_lang
):
    adder = start("relay", "add", adder_lang, limit=1, ttl=TTL)
    added = adder.wait_for("added")
    adder.finish()  # a clean exit: the slot is the worker's to keep
    worker = start(
        "relay", "adopt", worker_lang, limit=1, ttl=TTL, token=added["token"], hold=-1
    )
    adopted = worker.wait_for("adopted")
    assert adopted == {**adopted, "adopted": True, "fence": added["fence"]}
    time.sleep(2 * TTL)
    wg = WaitGroup(redis_server.url, "relay", limit=1, ttl=10)
    with pytest.raises(lockyard.TimeoutError):
        wg.add(timeout=0.2)  # never one slot too many while the worker runs
    worker.tell()
    assert worker.wait_for("checked")["healthy"] is True
    assert worker.wait_for("done")["freed"] is True
    worker.finish()
    assert wg.count() == 0
    assert within(1.0, lambda: fence_only(redis_server, "relay"))


@pytest.mark.parametrize("worker_lang", ["py", "rb"])
def test_a_killed_worker_frees_its_adopted_slot_after_ttl_while_the_adder_lives(
    start, redis_server, worker_lang
):
    adder = start("orphan", "hold", limit=1, ttl=TTL, hold=-1)
    token = adder.wait_for("acquired")["token"]
    worker = start(
        "orphan", "adopt", worker_lang, limit=1, ttl=TTL, token=token, hold=-1
    )
    assert worker.wait_for("adopted")["adopted"] is True
    worker.signal(signal.SIGKILL)
    killed = time.monotonic()

    wg = WaitGroup(redis_server.url, "orphan", limit=1, ttl=10)
    other = wg.add(timeout=5.0)
    free_after = time.monotonic() - killed
    assert free_after >= TTL - REFRESH_EVERY - 0.1, (
        "freed while the worker's lease was live"
    )
    assert free_after <= TTL + 0.5, "the adder kept refreshing what it handed off"
    adder.tell("report")
    checked = adder.wait_for("checked")
    assert checked["healthy"] is False, "the adder still counts the slot as its own"
    assert adder.wait_for("done")["freed"] is False
    assert wg.done(other)


# etcd: the same group on a consensus store. Leases are whole seconds, kept
# alive every ttl/3; etcd looks for expired leases every 500 ms.
ETCD_TTL = 2


def test_etcd_processes_never_exceed_the_limit_and_reach_it(
    etcd_start, etcd_server, tmp_path
):
    crowd = start_crowd(
        etcd_start,
        tmp_path,
        "quota",
        ["py", "rb"] * 2,
        iterations=10,
        hold=0.01,
        ttl=10,
    )
    holds = [hold for worker in crowd for hold in worker.reports("hold")]
    assert len(holds) == 4 * 10
    most_inside = max(hold["inside"] for hold in holds)
    assert most_inside <= LIMIT, "more processes inside than the limit allows"
    assert most_inside == LIMIT, "the limit was never used in full"
    fences = [hold["fence"] for hold in holds]
    assert len(set(fences)) == len(fences), "a fencing token was granted twice"
    assert etcd_server.keys() == []


def test_etcd_sigkilled_holders_free_their_slots_after_ttl_and_not_before(
    etcd_start, etcd_server
):
    holders = [
        etcd_start("crash", "hold", lang, limit=2, ttl=ETCD_TTL, hold=60)
        for lang in ("py", "rb")
    ]
    fences = [holder.wait_for("acquired")["fence"] for holder in holders]
    for holder in holders:
        holder.signal(signal.SIGKILL)
    killed = time.monotonic()

    wg = lockyard.etcd.WaitGroup(etcd_server.url, "crash", limit=2, ttl=10)
    with pytest.raises(lockyard.TimeoutError):
        wg.add(timeout=0)
    assert wg.count() == 2
    tokens = [wg.add(timeout=10.0), wg.add(timeout=10.0)]
    free_after = time.monotonic() - killed
    assert free_after >= ETCD_TTL - ETCD_TTL / 3 - 0.1, (
        "a slot was taken while the killed holder's lease was live"
    )
    assert free_after <= ETCD_TTL + 1.5, "slots stayed taken long after the ttl"
    assert min(wg.fencing_token(token) for token in tokens) > max(fences)
    for token in tokens:
        assert wg.done(token)
    assert etcd_server.keys() == []


def test_etcd_done_from_another_process_frees_the_slot_and_ends_wait(etcd_start):
    holders = [
        etcd_start("handoff", "hold", lang, limit=2, ttl=ETCD_TTL, hold=-1)
        for lang in ("py", "rb")
    ]
    tokens = [holder.wait_for("acquired")["token"] for holder in holders]
    waiter = etcd_start("handoff", "wait", "rb", limit=2, timeout=20)
    waiter.wait_for("asking")

    assert etcd_start("handoff", "done", "rb", limit=2, token=tokens[0]).wait_for(
        "done"
    )["freed"]
    time.sleep(0.5)
    assert waiter.reports("waited") == [], "wait() returned while a slot is held"
    freer = etcd_start("handoff", "done", "py", limit=2, token=tokens[1])
    freed_at = freer.wait_for("done")["at"]
    waited = waiter.wait_for("waited")
    assert waited["idle"] is True
    assert (waited["at"] - freed_at) / 1e6 < 500, "wait() noticed the last done late"
    # The holders learn that someone else freed their slots at their next
    # keep-alive.
    time.sleep(ETCD_TTL / 3 + 0.5)
    for holder in holders:
        holder.tell("report")
        assert holder.wait_for("checked")["healthy"] is False
        assert holder.wait_for("done")["freed"] is False


@pytest.mark.parametrize(("adder_lang", "worker_lang"), [("py", "rb"), ("rb", "py")])
def test_etcd_slot_handed_to_a_worker_outlives_its_adder_until_done(
    etcd_start, etcd_server, adder_lang, worker_lang
):
    adder = etcd_start("relay", "add", adder_lang, limit=1, ttl=ETCD_TTL)
    added = adder.wait_for("added")
    adder.finish()  # a clean exit: the slot is the worker's to keep
    worker = etcd_start(
        "relay",
        "adopt",
        worker_lang,
        limit=1,
        ttl=ETCD_TTL,
        token=added["token"],
        hold=-1,
    )
    adopted = worker.wait_for("adopted")
    assert adopted == {**adopted, "adopted": True, "fence": added["fence"]}
    time.sleep(2 * ETCD_TTL)
    wg = lockyard.etcd.WaitGroup(etcd_server.url, "relay", limit=1, ttl=10)
    with pytest.raises(lockyard.TimeoutError):
        wg.add(timeout=0.2)  # never one slot too many while the worker runs
    second = etcd_start("relay", "adopt", "py", limit=1, token=added["token"])
    assert second.wait_for("adopted")["adopted"] is False, "a slot has one adopter"
    worker.tell()
    assert worker.wait_for("checked")["healthy"] is True
    assert worker.wait_for("done")["freed"] is True
    worker.finish()
    assert wg.count() == 0
    assert etcd_server.keys() == []
