"""Locks on etcd, the consensus store: for locks that must hold through a
failover (etcd commits every grant through Raft before it answers).

>>> with Lock("etcd://127.0.0.1:2379", "deploy", ttl=30.0) as lock:
...     lock.check_health()
>>> quota = WaitGroup("etcd://127.0.0.1:2379", "api-quota", limit=3)
>>> with quota.slot() as slot:
...     slot.check_health()
>>> with Session("etcd://127.0.0.1:2379", ttl=15.0, lock_delay=15.0) as session:
...     with Lock("etcd://127.0.0.1:2379", "task-7", session=session, value="worker-3"):
...         session.check_health()
"""

from __future__ import annotations

from lockyard._lockyard import EtcdLock as Lock
from lockyard._lockyard import EtcdSession as Session
from lockyard._lockyard import EtcdWaitGroup as WaitGroup
from lockyard._lockyard import RedisSlot as Slot
from lockyard._lockyard import etcd_holder

__all__ = ["Lock", "Session", "Slot", "WaitGroup", "holder"]


def holder(url: str, name: str) -> str | None:
    """What the current holder of the lock ``name`` stored (its ``value``
    under a session, else its identity), or None when nobody holds it.
    While a lost session's ``lock_delay`` bars the name, the value it held
    it with if its behavior is ``"release"``."""
    return etcd_holder(url, name)
