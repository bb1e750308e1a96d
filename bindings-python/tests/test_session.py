"""Sessions, locks under them, exclusive workers and elections: API shape,
values, cleanup and bad input, in one process."""

from __future__ import annotations

from collections.abc import Callable

import lockyard
import pytest
from lockyard.redis import Election, Lock, Session, Term, exclusive, holder
from redis_server import Redis


def test_session_is_a_context_manager_that_destroys_on_exit(
    url: str, name: str
) -> None:
    with Session(url, ttl=2.0, lock_delay=0) as session:
        assert session.healthy and session.ttl == 2.0 and session.behavior == "release"
        assert len(session.id) == 32 and session.id in repr(session)
        lock = Lock(url, name, session=session, value="worker-1")
        assert lock.try_acquire()
        lock.check_health()
        assert holder(url, name) == "worker-1"
    assert not session.healthy and not lock.healthy
    with pytest.raises(lockyard.LockUnhealthyError, match="destroyed"):
        session.check_health()
    with pytest.raises(lockyard.LockUnhealthyError):
        lock.check_health()
    with Session(url) as other:
        assert Lock(url, name, session=other).try_acquire(), "destroy frees at once"


@pytest.mark.parametrize(("behavior", "kept"), [("release", "w1"), ("delete", None)])
def test_destroy_leaves_only_expiring_keys(
    redis: Redis, url: str, name: str, behavior: str, kept: str | None
) -> None:
    session = Session(url, ttl=5.0, behavior=behavior, lock_delay=5.0)
    locks = [Lock(url, f"{name}-{i}", session=session, value="w1") for i in range(3)]
    assert all(lock.try_acquire() for lock in locks)
    session.destroy()
    session.destroy()  # idempotent
    assert holder(url, f"{name}-0") == kept
    left = redis.keys()
    for key in left:
        assert key.endswith((":fence", ":value")), f"{key} left behind"
        ttl = redis.command("PTTL", key)
        assert isinstance(ttl, int) and ttl > 0, key


def test_exclusive_yields_only_won_names_and_releases_each(url: str, name: str) -> None:
    tasks = [f"{name}-{i}" for i in range(4)]
    with Session(url) as mine, Session(url) as theirs:
        rival = Lock(url, tasks[1], session=theirs)
        assert rival.try_acquire()
        ran = []
        for task in exclusive(url, tasks, session=mine):
            assert not Lock(url, task, session=theirs).try_acquire()
            ran.append(task)
        assert ran == [tasks[0], *tasks[2:]]
        assert Lock(url, tasks[0], session=theirs).try_acquire(), (
            "released as the loop moved on"
        )
        with pytest.raises(RuntimeError):
            for _task in exclusive(url, tasks[2:], session=mine):
                raise RuntimeError("the task failed")
        assert Lock(url, tasks[2], session=theirs).try_acquire(), "released on raise"


def test_election_campaign_leader_resign(url: str, name: str) -> None:
    with Session(url) as a, Session(url) as b:
        first, second = Election(url, name, a), Election(url, name, session=b)
        assert first.leader() is None and not first.is_leader
        assert first.campaign("node-a", timeout=0)
        assert first.is_leader and first.term == first.fencing_token
        assert not second.campaign("node-b", timeout=0.2)
        assert second.leader() == "node-a"
        with pytest.raises(lockyard.AlreadyLockedError):
            first.campaign("node-a")
        first.resign()
        with pytest.raises(lockyard.NotLockedError):
            first.resign()
        assert second.campaign("node-b", timeout=1.0)
        assert first.fencing_token is None
        assert (second.fencing_token or 0) > 0 and first.leader() == "node-b"


def test_observe_yields_terms_and_ends_after_its_timeout(url: str, name: str) -> None:
    with Session(url) as session:
        election = Election(url, name, session)
        observer = election.observe(timeout=0.3)
        start = next(observer)
        assert isinstance(start, Term) and start.value is None
        election.campaign("me")
        election.resign()
        terms = list(observer)
        assert [t.value for t in terms] == ["me", None]
        assert terms[0].fencing_token == terms[1].fencing_token
        assert terms[0] == terms[0] and "me" in repr(terms[0])


@pytest.mark.parametrize(
    "make",
    [
        lambda url: Session(url, ttl=0),
        lambda url: Session(url, ttl=-1.0),
        lambda url: Session(url, behavior="sometimes"),
        lambda url: Session(url, lock_delay=-1.0),
        lambda url: Session(url, ttl=1e19),
        lambda url: Session(url, ttl=float("nan")),
        lambda url: Session(url, ttl=18446744073709551.616),
        lambda url: Session(url, lock_delay=31 * 86400),
        lambda url: Session(url, lock_delay=float("inf")),
        lambda url: Session(url, ttl="15"),  # type: ignore[arg-type]
        lambda url: Lock(url, "x", value="v"),
        lambda url: Lock(url, "x", ttl=5.0, session=Session(url)),
    ],
)
def test_bad_input_is_a_config_error(
    redis: Redis, url: str, make: Callable[[str], object]
) -> None:
    with pytest.raises(lockyard.ConfigError):
        make(url)
    assert redis.keys() == []


def test_a_destroyed_session_takes_no_new_locks(
    redis: Redis, url: str, name: str
) -> None:
    session = Session(url)
    lock = Lock(url, name, session=session)
    session.destroy()
    with pytest.raises(lockyard.ConfigError, match="destroyed"):
        Lock(url, name, session=session)
    with pytest.raises(lockyard.ConfigError, match="destroyed"):
        Election(url, name, session)
    with pytest.raises(lockyard.ConfigError, match="destroyed"):
        lock.try_acquire()
    with Session(url) as live, pytest.raises(lockyard.ConfigError):
        Election(url, name, live).campaign("")
    assert redis.keys() == []
