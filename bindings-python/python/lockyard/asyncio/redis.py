"""asyncio twins of ``lockyard.redis``: ``Lock``, ``WaitGroup``,
``Session``, ``Election`` and ``exclusive`` on a Redis server or Redis
Cluster, with coroutines where the sync classes wait or ask Redis. Each
asyncio Task is a holder.

>>> lock = Lock(url, "deploy", ttl=30.0, timeout=10.0)
>>> async with lock:  # lockyard.TimeoutError after 10 s
...     lock.check_health()
>>> async with WaitGroup(url, "api-quota", limit=3).slot() as slot:
...     print(slot.token, slot.fencing_token)
>>> async with Session(url, ttl=15.0) as session:
...     async for task in exclusive(url, ["task-1", "task-2"], session=session):
...         await run(task)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from lockyard._lockyard import (
    RedisSession,
    async_redis_election,
    async_redis_lock,
    async_redis_wait_group,
    redis_session_create,
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
    """A distributed lock on a Redis server (or Redis Cluster), held per
    asyncio Task (see ``TaskLock``), sharing names, queue and fencing
    tokens with ``lockyard.redis.Lock``.
    """

    def __init__(
        self,
        url: str,
        name: str,
        ttl: float | None = None,
        timeout: float | None = None,
        *,
        refresh_interval: float | None = None,
        max_refresh_fails: int | None = None,
        identity_prefix: str | None = None,
        connect_timeout: float | None = None,
        session: Session | RedisSession | None = None,
        value: str | None = None,
    ) -> None:
        """Validates every option without touching the server: bad values
        raise ``lockyard.ConfigError``. ``timeout`` is the wait of ``async
        with lock:`` (None: forever). ``session`` is a created ``Session``
        of this module or a ``lockyard.redis.Session``.
        """
        self._native = async_redis_lock(
            url,
            name,
            ttl,
            timeout,
            refresh_interval=refresh_interval,
            max_refresh_fails=max_refresh_fails,
            identity_prefix=identity_prefix,
            connect_timeout=connect_timeout,
            session=native_session(session),
            value=value,
        )


class WaitGroup(TaskGroup):
    """At most ``limit`` holders at a time across every process, with Go's
    WaitGroup shape, for asyncio (see ``TaskGroup``); it shares names and
    slots with ``lockyard.redis.WaitGroup``.
    """

    def __init__(
        self,
        url: str,
        name: str,
        limit: int,
        ttl: float | None = None,
        *,
        refresh_interval: float | None = None,
        max_refresh_fails: int | None = None,
        connect_timeout: float | None = None,
    ) -> None:
        self._native = async_redis_wait_group(
            url,
            name,
            limit,
            ttl,
            refresh_interval=refresh_interval,
            max_refresh_fails=max_refresh_fails,
            connect_timeout=connect_timeout,
        )


class Session(TaskSession):
    """A lease that locks and elections live under (see
    ``lockyard.redis.Session``), created and destroyed by awaiting:

    >>> async with Session(url, ttl=15.0, lock_delay=15.0) as session:
    ...     lock = Lock(url, "task-7", session=session, value="worker-3")
    >>> session = await Session(url)  # or create it without a block
    >>> await session.destroy()

    The constructor only checks its arguments' types; the session is
    created on the server (and bad values raise ``lockyard.ConfigError``)
    when it is awaited or entered. A session created once stays that one:
    awaiting it again returns it unchanged.
    """

    _create = staticmethod(redis_session_create)


class Election(TaskElection):
    """Leader election under a session (see ``lockyard.redis.Election``),
    campaigning, resigning and observing by awaiting. Its term is the
    process's, as in the sync class: one campaign at a time wins it.

    >>> election = Election(url, "scheduler", session=session)
    >>> if await election.campaign("node-a", timeout=10.0):
    ...     election.check_health()
    >>> async for term in election.observe(timeout=60.0):
    ...     print(term.value, term.fencing_token)
    """

    _make = staticmethod(async_redis_election)


def exclusive(
    url: str, names: Iterable[str], *, session: Session | RedisSession
) -> AsyncIterator[str]:
    """Yields only the names whose lock this worker won under ``session``,
    trying each once and skipping taken ones without waiting (see
    ``lockyard.redis.exclusive``). Each lock is held by the iterating task
    while the loop body runs and released when the loop moves on. A loop
    that breaks or raises leaves the generator to be closed, which
    releases the last lock: soon after, by the event loop, or at once when
    the loop runs inside ``contextlib.aclosing``.

    >>> async for task in exclusive(url, tasks, session=session):
    ...     session.check_health()  # before each step that must not run twice
    """
    return walk(Lock, url, names, session)
