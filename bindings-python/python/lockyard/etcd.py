"""Primitives on etcd, the consensus store, for locks that must hold
through a failover (etcd commits every grant through Raft before it
answers): locks, wait groups, sessions that locks and elections live
under, mutually exclusive workers, and leader election.

>>> with Lock("etcd://127.0.0.1:2379", "deploy", ttl=30.0) as lock:
...     lock.check_health()
>>> quota = WaitGroup("etcd://127.0.0.1:2379", "api-quota", limit=3)
>>> with quota.slot() as slot:
...     slot.check_health()
>>> with Session("etcd://127.0.0.1:2379", ttl=15.0, lock_delay=15.0) as session:
...     with Lock("etcd://127.0.0.1:2379", "task-7", session=session, value="worker-3"):
...         session.check_health()
...     for task in exclusive("etcd://127.0.0.1:2379", ["task-1", "task-2"], session=session):
...         run(task)  # only the tasks this worker won, each exactly once
...     election = Election("etcd://127.0.0.1:2379", "scheduler", session=session)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from lockyard._exclusive import walk
from lockyard._lockyard import EtcdElection as Election
from lockyard._lockyard import EtcdLock as Lock
from lockyard._lockyard import EtcdSession as Session
from lockyard._lockyard import EtcdWaitGroup as WaitGroup
from lockyard._lockyard import RedisObserver as Observer
from lockyard._lockyard import RedisSlot as Slot
from lockyard._lockyard import RedisTerm as Term
from lockyard._lockyard import etcd_claim, etcd_holder

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
    """What the current holder of the lock ``name`` stored (its ``value``
    under a session or the leader's value of an election, else its
    identity), or None when nobody holds it. While a lost session's
    ``lock_delay`` bars the name, the value it held it with if its behavior
    is ``"release"``."""
    return etcd_holder(url, name)


def exclusive(url: str, names: Iterable[str], *, session: Session) -> Iterator[str]:
    """Yields only the names whose lock this worker won under ``session``,
    trying each once and skipping taken ones without waiting. Each lock is
    held while the loop body runs and released when the loop moves on,
    breaks, or raises; all of them live on the session's lease.

    >>> for task in exclusive(url, tasks, session=session):
    ...     session.check_health()  # before each step that must not run twice
    """
    return walk(etcd_claim, url, names, session)
