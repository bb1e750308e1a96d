"""Workers under sessions as separate processes: tasks run on one worker at
a time, a killed worker's task comes free after ttl + lock_delay and not
before, a paused worker learns it lost its session, and an observer sees
every change of leadership in fencing order."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from lockyard.redis import Election, Lock, Session

Spawn = Callable[..., "subprocess.Popen[str]"]

WORKER = """
    import json, os, sys, time
    from lockyard.redis import Session, exclusive

    url, prefix, log = sys.argv[1], sys.argv[2], sys.argv[3]
    tasks = [f"{prefix}-{i}" for i in range(9)]
    with Session(url, ttl=0.5, lock_delay=0.5) as session:
        for task in exclusive(url, tasks, session=session):
            done = f"{log}.{task}.done"
            if os.path.exists(done):
                continue
            with open(log, "a") as out:
                out.write(json.dumps(["start", task, os.getpid(), time.monotonic()]) + "\\n")
            time.sleep(0.05)
            session.check_health()
            with open(log, "a") as out:
                out.write(json.dumps(["end", task, os.getpid(), time.monotonic()]) + "\\n")
            open(done, "w").close()
"""

HOLD = """
    import json, sys
    import lockyard
    from lockyard.redis import Lock, Session

    url, name, ttl, delay = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
    session = Session(url, ttl=ttl, lock_delay=delay)
    lock = Lock(url, name, session=session, value="held")
    assert lock.try_acquire()
    print(json.dumps({"fencing_token": lock.fencing_token}), flush=True)
    for _ in sys.stdin:
        print(json.dumps({"session": session.healthy, "lock": lock.healthy}), flush=True)
"""


def ask(child: subprocess.Popen[str]) -> dict[str, object]:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write("?\n")
    return dict(json.loads(child.stdout.readline()))


def started(child: subprocess.Popen[str]) -> int:
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, child.communicate()[1]
    return int(json.loads(line)["fencing_token"])


def test_each_task_runs_once_on_one_worker_at_a_time(
    url: str, name: str, spawn: Spawn, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    workers = [spawn(WORKER, url, name, str(log)) for _ in range(3)]
    for worker in workers:
        _, err = worker.communicate(timeout=30)
        assert worker.returncode == 0, err
    events = [json.loads(line) for line in log.read_text().splitlines()]
    running: dict[str, int] = {}
    ran: list[str] = []
    for kind, task, pid, _at in events:
        if kind == "start":
            assert task not in running, f"{task} ran on two workers at once"
            running[task] = pid
            ran.append(task)
        else:
            assert running.pop(task) == pid
    assert sorted(ran) == sorted(f"{name}-{i}" for i in range(9)), (
        "each task exactly once"
    )


def test_killed_workers_task_is_free_after_ttl_plus_lock_delay(
    url: str, name: str, spawn: Spawn
) -> None:
    ttl, delay = 0.6, 0.8
    worker = spawn(HOLD, url, name, str(ttl), str(delay))
    started(worker)
    time.sleep(3 * ttl)
    assert ask(worker) == {"session": True, "lock": True}, "kept past its ttl"
    with Session(url, ttl=5.0) as session:
        lock = Lock(url, name, session=session)
        assert not lock.try_acquire(), "taken from a live worker"
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        killed_at = time.monotonic()
        while not lock.try_acquire():
            assert time.monotonic() - killed_at < 5, "never freed"
            time.sleep(0.02)
        waited = time.monotonic() - killed_at
    # Its last renewal came at most ttl/2 before the kill.
    assert ttl / 2 + delay - 0.05 <= waited <= ttl + delay + 0.4, waited


def test_paused_worker_finds_its_session_unhealthy_on_resume(
    url: str, name: str, spawn: Spawn
) -> None:
    worker = spawn(HOLD, url, name, "0.4", "0")
    paused_token = started(worker)
    worker.send_signal(signal.SIGSTOP)
    time.sleep(1.0)
    with Session(url) as session:
        lock = Lock(url, name, session=session)
        assert lock.try_acquire(), "the paused worker's lease ran out"
        worker.send_signal(signal.SIGCONT)
        assert ask(worker) == {"session": False, "lock": False}
        assert (lock.fencing_token or 0) > paused_token
        lock.check_health()


CAMPAIGN = """
    import sys
    from lockyard.redis import Election, Session

    url, name, value = sys.argv[1], sys.argv[2], sys.argv[3]
    with Session(url, ttl=2.0, lock_delay=0) as session:
        election = Election(url, name, session)
        for command in sys.stdin:
            if command.strip() == "campaign":
                election.campaign(value)
            else:
                election.resign()
            print(election.fencing_token, flush=True)
"""


def test_observe_reports_every_change_in_fencing_order(
    url: str, name: str, spawn: Spawn
) -> None:
    a, b = spawn(CAMPAIGN, url, name, "a"), spawn(CAMPAIGN, url, name, "b")

    def tell(child: subprocess.Popen[str], command: str) -> None:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(command + "\n")
        assert child.stdout.readline()

    with Session(url) as session:
        observer = Election(url, name, session).observe(timeout=1.0)
        assert next(observer).value is None
        # Leadership moves twice quickly, then once more.
        for child, command in [
            (a, "campaign"),
            (a, "resign"),
            (b, "campaign"),
            (b, "resign"),
            (a, "campaign"),
        ]:
            tell(child, command)
        terms = list(observer)
    assert [t.value for t in terms] == ["a", None, "b", None, "a"]
    fences = [t.fencing_token for t in terms]
    assert fences[0] == fences[1] < fences[2] == fences[3] < fences[4]
