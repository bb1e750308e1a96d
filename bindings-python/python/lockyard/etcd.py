"""Locks on etcd, the consensus store: for locks that must hold through a
failover (etcd commits every grant through Raft before it answers).

>>> with Lock("etcd://127.0.0.1:2379", "deploy", ttl=30.0) as lock:
...     lock.check_health()
>>> quota = WaitGroup("etcd://127.0.0.1:2379", "api-quota", limit=3)
>>> with quota.slot() as slot:
...     slot.check_health()
"""

from __future__ import annotations

from lockyard._lockyard import EtcdLock as Lock
from lockyard._lockyard import EtcdWaitGroup as WaitGroup
from lockyard._lockyard import RedisSlot as Slot
from lockyard._lockyard import etcd_holder

__all__ = ["Lock", "Slot", "WaitGroup", "holder"]


def holder(url: str, name: str) -> str | None:
    """The identity stored by the current holder of the lock ``name``, or
    None when nobody holds it."""
    return etcd_holder(url, name)
