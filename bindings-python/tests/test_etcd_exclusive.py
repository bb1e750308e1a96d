"""lockyard.etcd.exclusive against a real etcd member: each task is won by
one worker at a time, its lock is released as the loop moves on, breaks
or raises, and nothing is left in etcd once the workers' sessions end."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest
from etcd_server import Etcd
from lockyard.etcd import Lock, Session, exclusive

Spawn = Callable[..., "subprocess.Popen[str]"]


def taken(url: str, task: str, session: Session) -> bool:
    """Whether another worker holds ``task``: a probe under ``session``
    fails to take it (and gives it back at once if it did not)."""
    probe = Lock(url, task, session=session)
    if probe.try_acquire():
        probe.release()
        return False
    return True


def test_exclusive_yields_only_free_tasks_and_releases_each_as_it_moves_on(
    etcd: Etcd, name: str
) -> None:
    tasks = [f"{name}-{i}" for i in range(4)]
    mine, theirs = Session(etcd.url, ttl=5.0), Session(etcd.url, ttl=5.0)
    with mine, theirs, Session(etcd.url, ttl=5.0) as probes:
        rival = Lock(etcd.url, tasks[1], session=theirs)
        assert rival.try_acquire()
        ran: list[str] = []
        for task in exclusive(etcd.url, tasks, session=mine):
            assert taken(etcd.url, task, probes), f"{task} not held while it runs"
            if ran:
                assert not taken(etcd.url, ran[-1], probes), "not released on moving on"
            ran.append(task)
        assert ran == [tasks[0], *tasks[2:]]
        assert not taken(etcd.url, tasks[3], probes), "the last task kept"

        for _task in exclusive(etcd.url, tasks[2:], session=mine):
            break
        assert not taken(etcd.url, tasks[2], probes), "not released on break"
        with pytest.raises(RuntimeError):
            for _task in exclusive(etcd.url, tasks[2:], session=mine):
                raise RuntimeError("the task failed")
        assert not taken(etcd.url, tasks[2], probes), "not released on raise"
        rival.release()
    assert etcd.keys() == []


# A worker that walks the tasks and holds each one it won until told to
# move on.
WORKER = """
    import sys
    from lockyard.etcd import Session, exclusive

    url, tasks = sys.argv[1], sys.argv[2:]
    with Session(url, ttl=5.0, lock_delay=5.0) as session:
        for task in exclusive(url, tasks, session=session):
            print(task, flush=True)
            sys.stdin.readline()
    print("done", flush=True)
"""


def test_two_workers_never_win_the_same_task_at_once(
    etcd: Etcd, name: str, spawn: Spawn
) -> None:
    tasks = [f"{name}-{i}" for i in range(3)]
    worker = spawn(WORKER, etcd.url, *tasks)
    assert worker.stdin is not None and worker.stdout is not None

    def holds() -> str:
        """The task the worker has won and holds now."""
        assert worker.stdout is not None
        task = worker.stdout.readline().strip()
        assert task, worker.communicate()[1]
        return task

    def move_on() -> None:
        assert worker.stdin is not None
        worker.stdin.write("next\n")

    with Session(etcd.url, ttl=5.0, lock_delay=5.0) as mine:
        assert holds() == tasks[0]
        assert list(exclusive(etcd.url, tasks, session=mine)) == tasks[1:]
        # Our claims went with our loop: the worker wins the next task.
        move_on()
        assert holds() == tasks[1]
        assert list(exclusive(etcd.url, tasks, session=mine)) == [tasks[0], tasks[2]]
        move_on()
        assert holds() == tasks[2]
        assert list(exclusive(etcd.url, tasks, session=mine)) == tasks[:2]
        move_on()
        assert holds() == "done"
        assert list(exclusive(etcd.url, tasks, session=mine)) == tasks
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert etcd.keys() == []
