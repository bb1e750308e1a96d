"""A forked child never ends what its parent holds: however it leaves the
blocks it inherited (normally, by exception, by sys.exit) and whatever its
interpreter finalizes at exit, the parent keeps its lock, its slot, its
session and the locks under it, its leadership, its exclusive task, its
quorum lock and its GCS lock."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable

import lockyard
import pytest
from gcs_servers import start_faithful_gcs, start_fake_gcs
from lockyard.gcs import Lock as GcsLock
from lockyard.quorum import RwLock
from lockyard.redis import Election, Lock, Session, WaitGroup

Spawn = Callable[..., "subprocess.Popen[str]"]

# The parent takes one hold of every kind, each in its block, then forks
# inside all of them. The child ends as `how` says, by the interpreter's
# own exit (finalizers included), never by os._exit.
PARENT = """
    import json, os, sys
    from lockyard.quorum import RwLock
    from lockyard.redis import Election, Lock, Session, WaitGroup, exclusive

    url, name, how = sys.argv[1:4]
    lock = Lock(url, f"{name}-lock")
    slots = WaitGroup(url, f"{name}-slots", limit=1)
    rw = RwLock([url], f"{name}-rw")
    with lock, slots.slot() as slot, Session(url, ttl=5.0) as session, rw.write():
        under_session = Lock(url, f"{name}-under-session", session=session)
        assert under_session.try_acquire()
        election = Election(url, f"{name}-election", session=session)
        assert election.campaign("parent", timeout=0)
        for task in exclusive(url, [f"{name}-task"], session=session):
            pid = os.fork()
            if pid == 0:
                if how == "exit":
                    sys.exit(0)
                if how == "raise":
                    raise RuntimeError("the child's own failure")
                continue
            _, status = os.waitpid(pid, 0)
            print(json.dumps({"child": os.waitstatus_to_exitcode(status)}), flush=True)
            sys.stdin.readline()  # the test looks from outside meanwhile
            print(json.dumps({
                "lock": lock.healthy,
                "slot": slot.healthy,
                "session": session.healthy,
                "under_session": under_session.healthy,
                "leader": election.is_leader,
                "rw": rw.healthy,
            }), flush=True)
            under_session.release()
            election.resign()
    # Here only in the parent, and in a child that left every block normally.
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize(("how", "status"), [("exit", 0), ("raise", 1), ("leave", 0)])
def test_a_forked_child_keeps_every_hold_of_its_parent(
    url: str, name: str, spawn: Spawn, how: str, status: int
) -> None:
    parent = spawn(PARENT, url, name, how)
    assert parent.stdout is not None and parent.stdin is not None
    line = parent.stdout.readline()
    assert line, parent.communicate()[1]
    assert json.loads(line) == {"child": status}

    assert not Lock(url, f"{name}-lock").try_acquire()
    with pytest.raises(lockyard.TimeoutError):
        WaitGroup(url, f"{name}-slots", limit=1).add(timeout=0)
    assert not Lock(url, f"{name}-under-session").try_acquire()
    assert not Lock(url, f"{name}-task").try_acquire()
    assert not RwLock([url], f"{name}-rw").acquire_read(timeout=0)
    with Session(url) as rivals:
        rival = Election(url, f"{name}-election", session=rivals)
        assert rival.leader() == "parent"
        assert not rival.campaign("rival", timeout=0)

    parent.stdin.write("report\n")
    parent.stdin.flush()
    health = json.loads(parent.stdout.readline())
    assert health == dict.fromkeys(health, True) and len(health) == 6
    _, err = parent.communicate(timeout=30)
    assert parent.returncode == 0, err
    # The child failed with its own exception, not a lockyard error from a
    # block it left.
    assert "lockyard" not in err, err
    assert ("RuntimeError: the child's own failure" in err) == (how == "raise"), err


GCS_PARENT = """
    import json, os, sys
    from lockyard.gcs import Lock

    name, how = sys.argv[1:3]
    lock = Lock(bucket_name="locks", path=name, ttl=10.0)
    with lock:
        pid = os.fork()
        if pid == 0:
            if how == "exit":
                sys.exit(0)
            raise RuntimeError("the child's own failure")
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"child": os.waitstatus_to_exitcode(status)}), flush=True)
        sys.stdin.readline()
        print(json.dumps({"healthy": lock.healthy, "owned": lock.owned()}), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize(("how", "status"), [("exit", 0), ("raise", 1)])
def test_a_forked_child_keeps_its_parents_gcs_lock(
    name: str,
    spawn: Spawn,
    how: str,
    status: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gcs = start_fake_gcs()
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.host)
        parent = spawn(GCS_PARENT, name, how)
        assert parent.stdout is not None and parent.stdin is not None
        line = parent.stdout.readline()
        assert line, parent.communicate()[1]
        assert json.loads(line) == {"child": status}
        assert not GcsLock(bucket_name="locks", path=name).try_acquire()
        parent.stdin.write("report\n")
        parent.stdin.flush()
        assert json.loads(parent.stdout.readline()) == {"healthy": True, "owned": True}
        _, err = parent.communicate(timeout=30)
        assert parent.returncode == 0, err
        assert "lockyard" not in err, err
    finally:
        gcs.stop()


GCS_SHARED_PREFIX = """
    import json, os, sys
    from lockyard.gcs import Lock

    name = sys.argv[1]
    lock = Lock(bucket_name="locks", path=name, ttl=10.0, instance_identity_prefix="worker")
    with lock:
        pid = os.fork()
        if pid == 0:
            # The parent's identity with instant recovery would hand the
            # child the parent's hold; the child must wait like anyone else.
            os._exit(3 if lock.acquire(timeout=0.5) else 0)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"child": os.waitstatus_to_exitcode(status),
                          "healthy": lock.healthy, "owned": lock.owned()}), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_with_its_parents_identity_prefix_waits_like_anyone(
    name: str, spawn: Spawn, monkeypatch: pytest.MonkeyPatch
) -> None:
    gcs = start_fake_gcs()
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.host)
        parent = spawn(GCS_SHARED_PREFIX, name)
        out, err = parent.communicate(timeout=60)
        assert parent.returncode == 0, err
        assert json.loads(out) == {"child": 0, "healthy": True, "owned": True}, err
    finally:
        gcs.stop()


# A pre-forking server: lockyard imported, no lock built yet, then every
# process (master and worker alike) builds its own lock from the same
# settings, prefix included.
GCS_WORKERS_SHARE_A_PREFIX = """
    import json, os, sys
    from lockyard.gcs import Lock

    name = sys.argv[1]
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        lock = Lock(bucket_name="locks", path=name, ttl=10.0, instance_identity_prefix="worker")
        with lock:
            os.write(ready_w, b"x")
            os.read(done_r, 1)
        os._exit(0)
    os.read(ready_r, 1)
    lock = Lock(bucket_name="locks", path=name, ttl=10.0, instance_identity_prefix="worker")
    took = lock.acquire(timeout=0.5)
    os.write(done_w, b"x")
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"child": os.waitstatus_to_exitcode(status), "took": took,
                      "prefix": lock.identity.split("/")[0]}), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_workers_forked_before_building_their_gcs_locks_never_share_an_identity(
    name: str, spawn: Spawn, monkeypatch: pytest.MonkeyPatch
) -> None:
    gcs = start_faithful_gcs()
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.host)
        parent = spawn(GCS_WORKERS_SHARE_A_PREFIX, name)
        out, err = parent.communicate(timeout=60)
        assert parent.returncode == 0, err
        # The process started afresh keeps the gem's identity; the worker
        # forked from it has its own, so its hold is not "recovered".
        assert json.loads(out) == {"child": 0, "took": False, "prefix": "worker"}, err
    finally:
        gcs.stop()
