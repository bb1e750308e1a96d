"""Primitives on a Redis server or Redis Cluster: locks, sessions that
locks and elections live under, mutually exclusive workers, and leader
election.

>>> with Session(url, ttl=15.0, lock_delay=15.0) as session:
...     for task in exclusive(url, ["task-1", "task-2"], session=session):
...         run(task)  # only the tasks this worker won, each exactly once
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from lockyard._exclusive import walk
from lockyard._lockyard import RedisElection as Election
from lockyard._lockyard import RedisLock as Lock
from lockyard._lockyard import RedisObserver as Observer
from lockyard._lockyard import RedisSession as Session
from lockyard._lockyard import RedisSlot as Slot
from lockyard._lockyard import RedisTerm as Term
from lockyard._lockyard import RedisWaitGroup as WaitGroup
from lockyard._lockyard import redis_claim, redis_holder

__all__ = [
    "Election",
    "Lock",
    "Observer",
    "Session",
    "Slot",
    "Term",
    "WaitGroup",
    "exclusive",
    "holder",
]


def holder(url: str, name: str) -> str | None:
    """The value of the current holder of the lock ``name`` (``value=`` of a
    lock under a session, or the leader's value of an election), or None
    when nobody holds it or its holder stored no value.

    After a holder under a session with ``behavior="release"`` let go
    (released, destroyed, or lost), its value stays readable here until the
    name is taken again (at most an hour); with ``behavior="delete"`` it is
    gone with the grant. ``Election.leader()`` reports only live leaders.
    """
    return redis_holder(url, name)


def exclusive(url: str, names: Iterable[str], *, session: Session) -> Iterator[str]:
    """Yields only the names whose lock this worker won under ``session``,
    trying each once and skipping taken ones without waiting. Each lock is
    held while the loop body runs and released when the loop moves on,
    breaks, or raises; all of them live as long as the session.

    >>> for task in exclusive(url, tasks, session=session):
    ...     session.check_health()  # before each step that must not run twice
    """
    return walk(redis_claim, url, names, session)
