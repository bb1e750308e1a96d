"""lockyard.etcd.Election against a real etcd member: handover between
processes, observers, Ctrl-C during a campaign, fork, and bad input."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
from collections.abc import Callable

import lockyard
import lockyard.redis
import pytest
from etcd_server import Etcd
from lockyard.etcd import Election, Lock, Session, Term, exclusive, holder
from redis_server import Redis

Spawn = Callable[..., "subprocess.Popen[str]"]


def line(etcd: Etcd, name: str) -> list[str]:
    """The keys queued in the line of the election ``name``."""
    keys = etcd.keys()
    return [key for key in keys if key.startswith(f"lockyard/{name}/")]


def test_campaign_leader_resign_and_the_leaders_value(etcd: Etcd, name: str) -> None:
    with Session(etcd.url, ttl=5.0) as a, Session(etcd.url, ttl=5.0) as b:
        first, second = Election(etcd.url, name, a), Election(etcd.url, name, session=b)
        assert first.name == name and first.leader() is None and not first.is_leader
        assert first.campaign("node-a", timeout=0)
        first.check_health()
        assert first.is_leader and first.term == first.fencing_token
        assert f'<lockyard.etcd.Election name="{name}" leading term=' in repr(first)
        assert second.leader() == "node-a" and holder(etcd.url, name) == "node-a"
        assert not second.campaign("node-b", timeout=0)
        with pytest.raises(lockyard.AlreadyLockedError):
            first.campaign("node-a")
        first.resign()
        with pytest.raises(lockyard.NotLockedError):
            first.resign()
        with pytest.raises(lockyard.NotLockedError):
            first.check_health()
        assert first.fencing_token is None and first.leader() is None
        assert second.campaign("node-b", timeout=5.0)
        assert first.leader() == "node-b"
    # Leaving the blocks destroyed both sessions and with them every key.
    assert not second.is_leader
    assert etcd.keys() == []


CAMPAIGNER = """
    import sys
    from lockyard.etcd import Election, Session

    url, name, value = sys.argv[1:4]
    with Session(url, ttl=5.0, lock_delay=5.0) as session:
        election = Election(url, name, session)
        for command in sys.stdin:
            if command.strip() == "campaign":
                election.campaign(value)
            else:
                election.resign()
            print(election.fencing_token, flush=True)
"""


def test_leadership_passes_between_processes_with_growing_fencing_tokens(
    etcd: Etcd, name: str, spawn: Spawn, eventually: Callable[..., bool]
) -> None:
    other = spawn(CAMPAIGNER, etcd.url, name, "other")
    assert other.stdin is not None and other.stdout is not None

    def tell(command: str) -> str:
        assert other.stdin is not None and other.stdout is not None
        other.stdin.write(command + "\n")
        answer = other.stdout.readline()
        assert answer, other.communicate()[1]
        return answer.strip()

    with Session(etcd.url, ttl=5.0, lock_delay=5.0) as session:
        mine = Election(etcd.url, name, session)
        first = int(tell("campaign"))
        assert mine.leader() == "other"
        assert not mine.campaign("mine", timeout=0)
        assert tell("resign") == "None"
        assert mine.campaign("mine", timeout=0), "a resign hands over at once"
        second = mine.fencing_token
        assert second is not None and second > first
        assert mine.leader() == "mine"
        # The other process queues behind us and takes over when we resign.
        other.stdin.write("campaign\n")
        assert eventually(lambda: len(line(etcd, name)) == 2), line(etcd, name)
        assert mine.is_leader and mine.leader() == "mine"
        mine.resign()
        third = int(other.stdout.readline())
        assert third > second
        assert mine.leader() == "other" and not mine.is_leader
        assert tell("resign") == "None"
        assert mine.leader() is None
    _, err = other.communicate(timeout=30)
    assert other.returncode == 0, err
    assert etcd.keys() == []


def test_observe_yields_every_term_in_order_and_ends_after_its_timeout(
    etcd: Etcd, name: str
) -> None:
    with Session(etcd.url, ttl=5.0) as watching, Session(etcd.url, ttl=5.0) as a:
        b = Session(etcd.url, ttl=5.0, lock_delay=0)
        observer = Election(etcd.url, name, watching).observe(timeout=30.0)
        started = next(observer)
        assert isinstance(started, Term) and type(started).__name__ == "Term"
        assert started.value is None and started.fencing_token == 0
        ea, eb = Election(etcd.url, name, a), Election(etcd.url, name, b)
        assert ea.campaign("a", timeout=0)
        ea.resign()
        assert eb.campaign("b", timeout=0)
        b.destroy()  # a term also ends with its session
        assert ea.campaign("a", timeout=0)
        last = ea.fencing_token
        terms = list(itertools.islice(observer, 5))
        assert [t.value for t in terms] == ["a", None, "b", None, "a"]
        fences = [t.fencing_token for t in terms]
        assert fences[0] == fences[1] < fences[2] == fences[3] < fences[4] == last
        assert 'Term(value="a", fencing_token=' in repr(terms[0])
        assert terms[0] != terms[1] and terms[4] == terms[4]
        # Nothing changes any more: an observer with a timeout ends.
        quiet = Election(etcd.url, name, watching).observe(timeout=0.2)
        assert [(t.value, t.fencing_token) for t in quiet] == [("a", last)]
        assert lockyard.etcd.Term is lockyard.redis.Term
        assert lockyard.etcd.Observer is lockyard.redis.Observer
    assert etcd.keys() == []


CAMPAIGN_UNTIL_INTERRUPTED = """
    import sys
    from lockyard.etcd import Election, Session

    session = Session(sys.argv[1], ttl=5.0)
    election = Election(sys.argv[1], sys.argv[2], session)
    print("waiting", flush=True)
    try:
        election.campaign("interrupted")
    except KeyboardInterrupt:
        # The session lives on: whatever the campaign left stays visible.
        print(f"interrupted leader={election.is_leader}", flush=True)
    sys.stdin.readline()
    session.destroy()
"""


def test_ctrl_c_ends_a_campaign_and_leaves_nothing_in_line(
    etcd: Etcd, name: str, spawn: Spawn, eventually: Callable[..., bool]
) -> None:
    with Session(etcd.url, ttl=5.0) as session:
        leader = Election(etcd.url, name, session)
        assert leader.campaign("leader", timeout=0)
        child = spawn(CAMPAIGN_UNTIL_INTERRUPTED, etcd.url, name)
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline() == "waiting\n"
        assert eventually(lambda: len(line(etcd, name)) == 2), line(etcd, name)
        child.send_signal(signal.SIGINT)
        assert child.stdout.readline() == "interrupted leader=False\n"
        assert len(line(etcd, name)) == 1, line(etcd, name)
        assert leader.is_leader and leader.leader() == "leader"
        child.stdin.write("done\n")
        _, err = child.communicate(timeout=30)
        assert child.returncode == 0, err
        leader.resign()
    assert etcd.keys() == []


# The parent leads and holds an exclusive task, then forks inside both.
# The child ends as `how` says, by the interpreter's own exit (finalizers
# included), never by os._exit.
FORKING_LEADER = """
    import json, os, sys
    import lockyard
    from lockyard.etcd import Election, Session, exclusive

    url, name, how = sys.argv[1:4]
    with Session(url, ttl=5.0) as session:
        election = Election(url, name, session)
        assert election.campaign("parent", timeout=0)
        for task in exclusive(url, [f"{name}-task"], session=session):
            pid = os.fork()
            if pid == 0:
                try:
                    election.resign()
                except lockyard.NotLockedError:
                    pass
                else:
                    sys.exit(3)
                if election.is_leader or election.fencing_token is not None:
                    sys.exit(4)
                if how == "exit":
                    sys.exit(0)
                if how == "raise":
                    raise RuntimeError("the child's own failure")
                continue
            _, status = os.waitpid(pid, 0)
            print(json.dumps({"child": os.waitstatus_to_exitcode(status)}), flush=True)
            sys.stdin.readline()  # the test looks from outside meanwhile
            print(json.dumps({"leader": election.is_leader, "session": session.healthy}),
                  flush=True)
            election.resign()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize(("how", "status"), [("exit", 0), ("raise", 1), ("leave", 0)])
def test_a_forked_child_cannot_end_its_parents_leadership(
    etcd: Etcd, name: str, spawn: Spawn, how: str, status: int
) -> None:
    parent = spawn(FORKING_LEADER, etcd.url, name, how)
    assert parent.stdin is not None and parent.stdout is not None
    report = parent.stdout.readline()
    assert report, parent.communicate()[1]
    assert json.loads(report) == {"child": status}

    with Session(etcd.url, ttl=5.0) as rivals:
        rival = Election(etcd.url, name, rivals)
        assert rival.leader() == "parent"
        assert not rival.campaign("rival", timeout=0)
        assert list(exclusive(etcd.url, [f"{name}-task"], session=rivals)) == []

    parent.stdin.write("report\n")
    assert json.loads(parent.stdout.readline()) == {"leader": True, "session": True}
    _, err = parent.communicate(timeout=30)
    assert parent.returncode == 0, err
    # The child failed with its own exception, not a lockyard error from a
    # block it left.
    assert "lockyard" not in err, err
    assert ("RuntimeError: the child's own failure" in err) == (how == "raise"), err
    assert etcd.keys() == []


def test_bad_input_is_refused_before_anything_is_written(
    etcd: Etcd, redis: Redis, name: str
) -> None:
    with Session(etcd.url, ttl=5.0) as session:
        election = Election(etcd.url, name, session)
        with pytest.raises(lockyard.ConfigError, match="empty"):
            election.campaign("")
        for timeout in (-1.0, float("nan"), "5"):
            with pytest.raises(lockyard.ConfigError):
                election.campaign("me", timeout=timeout)  # type: ignore[arg-type]
        with pytest.raises(lockyard.ConfigError):
            election.observe(timeout=-1.0)
        with pytest.raises(lockyard.ConfigError):
            Election(etcd.url, "", session)
        with pytest.raises(lockyard.ConfigError, match="other etcd members"):
            Election("etcd://127.0.0.1:1", name, session)
        assert etcd.keys() == []
        with lockyard.redis.Session(redis.url) as redis_session:
            with pytest.raises(TypeError, match=r"lockyard\.etcd\.Session"):
                Election(etcd.url, name, redis_session)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=r"lockyard\.etcd\.Session"):
                next(exclusive(etcd.url, [name], session=redis_session))  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=r"lockyard\.redis\.Session"):
                lockyard.redis.Election(redis.url, name, session)  # type: ignore[arg-type]
            # Locks take a session of their backend alike.
            with pytest.raises(TypeError, match=r"lockyard\.etcd\.Session"):
                Lock(etcd.url, name, session=redis_session)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=r"lockyard\.redis\.Session"):
                lockyard.redis.Lock(redis.url, name, session=session)  # type: ignore[arg-type]
            assert Lock(etcd.url, name, session=None).name == name
    with pytest.raises(lockyard.ConfigError, match="destroyed"):
        Election(etcd.url, name, session)
    with pytest.raises(lockyard.ConfigError, match="destroyed"):
        election.campaign("me", timeout=0)
    assert etcd.keys() == []
