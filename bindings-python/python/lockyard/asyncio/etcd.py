"""asyncio twins of ``lockyard.etcd``: ``Lock``, ``WaitGroup``,
``Session``, ``Election`` and ``exclusive`` on etcd, the consensus store,
for locks that must hold through a failover. Each asyncio Task is a
holder; every request runs on lockyard's own threads, so a waiting task
holds no thread and never blocks the loop.

>>> lock = Lock("etcd://127.0.0.1:2379", "deploy", ttl=30.0, timeout=10.0)
>>> async with lock:  # lockyard.TimeoutError after 10 s
...     lock.check_health()
>>> async with WaitGroup("etcd://127.0.0.1:2379", "api-quota", limit=3).slot() as slot:
...     print(slot.token, slot.fencing_token)
>>> async with Session("etcd://127.0.0.1:2379", ttl=15.0) as session:
...     async for task in exclusive(url, ["task-1", "task-2"], session=session):
...         await run(task)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from lockyard._lockyard import (
    EtcdSession,
    async_etcd_election,
    async_etcd_lock,
    async_etcd_wait_group,
    etcd_session_create,
)
from lockyard.asyncio._group import Slot, TaskGroup
from lockyard.asyncio._lock import TaskLock
from lockyard.asyncio._session import (
    Observer,
    TaskElection,
    TaskSession,
    Term,
    native_session,
    walk,
)

__all__ = [
    "Election",
    "Lock",
    "Observer",
    "Session",
    "Slot",
    "Term",
    "WaitGroup",
    "exclusive",
]


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
        session: Session | EtcdSession | None = None,
        value: str | None = None,
    ) -> None:
        """Validates every option without sending a request: bad values
        raise ``lockyard.ConfigError``. ``ttl`` is the lease's, in whole
        seconds (rounded up); ``timeout`` is the wait of ``async with
        lock:`` (None: forever). ``session`` is a created ``Session`` of this
        module or a ``lockyard.etcd.Session``: the lock's key then rides on
        its lease and stores ``value``.
        """
        self._native = async_etcd_lock(
            url,
            name,
            ttl,
            timeout,
            identity_prefix=identity_prefix,
            connect_timeout=connect_timeout,
            session=native_session(session),
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


class Session(TaskSession):
    """An etcd lease that locks and elections live under (see
    ``lockyard.etcd.Session``), created and destroyed by awaiting:

    >>> async with Session(url, ttl=15.0, lock_delay=15.0) as session:
    ...     lock = Lock(url, "task-7", session=session, value="worker-3")
    >>> session = await Session(url)  # or create it without a block
    >>> await session.destroy()

    The constructor only checks its arguments' types; the lease is granted
    (and bad values raise ``lockyard.ConfigError``) when it is awaited or
    entered. A session created once stays that one.
    """

    _create = staticmethod(etcd_session_create)


class Election(TaskElection):
    """Leader election on etcd under a session (see
    ``lockyard.etcd.Election``), campaigning, resigning and observing by
    awaiting. Its term is the process's: one campaign at a time wins it.

    >>> election = Election(url, "scheduler", session=session)
    >>> if await election.campaign("node-a", timeout=10.0):
    ...     election.check_health()
    >>> async for term in election.observe(timeout=60.0):
    ...     print(term.value, term.fencing_token)
    """

    _make = staticmethod(async_etcd_election)


def exclusive(
    url: str, names: Iterable[str], *, session: Session | EtcdSession
) -> AsyncIterator[str]:
    """Yields only the names whose lock this worker won under ``session``,
    trying each once and skipping taken ones without waiting (see
    ``lockyard.etcd.exclusive``). Each lock is held by the iterating task
    while the loop body runs and released when the loop moves on (or when
    the generator is closed).

    >>> async for task in exclusive(url, tasks, session=session):
    ...     session.check_health()  # before each step that must not run twice
    """
    return walk(Lock, url, names, session)
