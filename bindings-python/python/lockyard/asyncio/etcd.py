"""asyncio twins of ``lockyard.etcd``'s ``Lock`` and ``WaitGroup``, on
etcd, the consensus store, for locks that must hold through a failover.
Each asyncio Task is a holder; every request runs on lockyard's own
threads, so a waiting task holds no thread and never blocks the loop.

>>> lock = Lock("etcd://127.0.0.1:2379", "deploy", ttl=30.0, timeout=10.0)
>>> async with lock:  # lockyard.TimeoutError after 10 s
...     lock.check_health()
>>> async with WaitGroup("etcd://127.0.0.1:2379", "api-quota", limit=3).slot() as slot:
...     print(slot.token, slot.fencing_token)
"""

from __future__ import annotations

from lockyard._lockyard import EtcdSession, async_etcd_lock, async_etcd_wait_group
from lockyard.asyncio._group import Slot, TaskGroup
from lockyard.asyncio._lock import TaskLock

__all__ = ["Lock", "Slot", "WaitGroup"]


class Lock(TaskLock):
    """A distributed lock on etcd, held per asyncio Task (see
    ``TaskLock``), sharing names, line and fencing tokens (its key's create
    revision) with ``lockyard.etcd.Lock``: waiters are served in arrival
    order, sync and async alike.
    """

    def __init__(
        self,
        url: str,
        name: str,
        ttl: float | None = None,
        timeout: float | None = None,
        *,
        identity_prefix: str | None = None,
        connect_timeout: float | None = None,
        session: EtcdSession | None = None,
        value: str | None = None,
    ) -> None:
        """Validates every option without sending a request: bad values
        raise ``lockyard.ConfigError``. ``ttl`` is the lease's, in whole
        seconds (rounded up); ``timeout`` is the wait of ``async with
        lock:`` (None: forever). ``session`` is a ``lockyard.etcd.Session``:
        the lock's key then rides on its lease and stores ``value``.
        """
        self._native = async_etcd_lock(
            url,
            name,
            ttl,
            timeout,
            identity_prefix=identity_prefix,
            connect_timeout=connect_timeout,
            session=session,
            value=value,
        )


class WaitGroup(TaskGroup):
    """At most ``limit`` holders at a time across every process, with Go's
    WaitGroup shape, for asyncio (see ``TaskGroup``); it shares names and
    slots with ``lockyard.etcd.WaitGroup``.
    """

    def __init__(
        self,
        url: str,
        name: str,
        limit: int,
        ttl: float | None = None,
        *,
        connect_timeout: float | None = None,
    ) -> None:
        """Validates every option without sending a request: bad values
        raise ``lockyard.ConfigError``. ``ttl`` is the lease's, in whole
        seconds (rounded up)."""
        self._native = async_etcd_wait_group(
            url, name, limit, ttl, connect_timeout=connect_timeout
        )
