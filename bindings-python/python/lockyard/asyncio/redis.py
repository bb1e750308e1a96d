"""asyncio twins of ``lockyard.redis``: ``Lock`` and ``WaitGroup`` on a
Redis server or Redis Cluster, with coroutines where the sync classes wait
or ask Redis. Each asyncio Task is a holder.

>>> lock = Lock(url, "deploy", ttl=30.0, timeout=10.0)
>>> async with lock:  # lockyard.TimeoutError after 10 s
...     lock.check_health()
>>> async with WaitGroup(url, "api-quota", limit=3).slot() as slot:
...     print(slot.token, slot.fencing_token)
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from lockyard._errors import ConfigError, Error
from lockyard._lockyard import (
    AsyncRedisLock,
    AsyncRedisWaitGroup,
    RedisSession,
    end_block,
)
from lockyard.asyncio._bridge import holder, settle

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Lock", "Slot", "WaitGroup"]


class Lock:
    """A distributed lock on a Redis server (or Redis Cluster), held per
    asyncio Task: two tasks sharing one ``Lock`` exclude each other as two
    processes do, and the same task acquiring it twice raises
    ``lockyard.AlreadyLockedError``. While held it is refreshed in the
    background; ``healthy`` and ``check_health()`` tell whether it may have
    been lost since. It shares names, queue and fencing tokens with
    ``lockyard.redis.Lock``: sync and async holders exclude each other.
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
        session: RedisSession | None = None,
        value: str | None = None,
    ) -> None:
        """Validates every option without touching the server: bad values
        raise ``lockyard.ConfigError``. ``timeout`` is the wait of ``async
        with lock:`` (None: forever). ``session`` is a
        ``lockyard.redis.Session``.
        """
        self._native = AsyncRedisLock(
            url,
            name,
            ttl,
            timeout,
            refresh_interval=refresh_interval,
            max_refresh_fails=max_refresh_fails,
            identity_prefix=identity_prefix,
            connect_timeout=connect_timeout,
            session=session,
            value=value,
        )

    @property
    def name(self) -> str:
        return self._native.name

    async def __aenter__(self) -> Self:
        """Waits with the constructor's ``timeout``; raises
        ``lockyard.TimeoutError`` when it runs out."""
        key = holder()
        await settle(
            lambda inbox, future: self._native.enter(inbox, future, key),
            lambda _: self._native.leave_in_background(key),
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Releases however the block ends, cancellation included; never
        replaces the block's exception (a failed release is noted on it)."""
        key = holder()
        try:
            await settle(lambda inbox, future: self._native.leave(inbox, future, key))
        except Error as failure:
            end_block(exc, failure)

    async def acquire(self, timeout: float | None = None) -> bool:
        """Waits up to ``timeout`` seconds (None: forever; 0: one attempt).
        True if acquired, False if the timeout ran out."""
        key = holder()

        def give_back(acquired: bool) -> None:
            if acquired:
                self._native.leave_in_background(key)

        acquired: bool = await settle(
            lambda inbox, future: self._native.acquire(inbox, future, key, timeout),
            give_back,
        )
        return acquired

    async def try_acquire(self) -> bool:
        """One attempt that never waits: True if the lock was free."""
        return await self.acquire(0)

    async def release(self) -> None:
        """Releases this task's hold (``lockyard.NotLockedError`` if none).
        If the lock had been lost meanwhile, logs a warning on the
        ``lockyard`` logger."""
        key = holder()
        await settle(lambda inbox, future: self._native.release(inbox, future, key))

    async def locked(self) -> bool:
        """Asks Redis whether anyone holds the lock."""
        held: bool = await settle(self._native.locked)
        return held

    def owned(self) -> bool:
        """Whether this task holds the lock, as this process knows it (no
        I/O: ``healthy`` tells whether the hold is surely still live)."""
        return self._native.fencing_token(holder()) is not None

    @property
    def healthy(self) -> bool:
        """Whether this task holds the lock and its lease is surely live."""
        return self._native.healthy(holder())

    def check_health(self) -> None:
        """Raises ``lockyard.LockUnhealthyError`` if this task's hold may be
        lost, ``lockyard.NotLockedError`` if it holds nothing."""
        self._native.check_health(holder())

    @property
    def fencing_token(self) -> int | None:
        """This task's grant's fencing token; None when not held."""
        return self._native.fencing_token(holder())

    @property
    def identity(self) -> str:
        """This task's holder identity, as stored with its grant."""
        return self._native.identity(holder())

    def __repr__(self) -> str:
        return f"<lockyard.asyncio.redis.Lock name={self.name!r}>"


class WaitGroup:
    """At most ``limit`` holders at a time across every process, with Go's
    WaitGroup shape, for asyncio: ``add``/``done``/``wait``, and ``async
    with wg.slot():``. Slots belong to the process, by token, as in
    ``lockyard.redis.WaitGroup``, with which it shares names and slots.
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
        self._native = AsyncRedisWaitGroup(
            url,
            name,
            limit,
            ttl,
            refresh_interval=refresh_interval,
            max_refresh_fails=max_refresh_fails,
            connect_timeout=connect_timeout,
        )

    @property
    def name(self) -> str:
        return self._native.name

    @property
    def limit(self) -> int:
        return self._native.limit

    async def add(self, timeout: float | None = None) -> str:
        """Takes a slot, waiting up to ``timeout`` seconds (None: forever;
        0: one attempt); its token. Raises ``lockyard.TimeoutError`` when
        the timeout runs out. Free it with ``done(token)``."""
        return await self._take(timeout, in_block=False)

    async def _take(self, timeout: float | None, *, in_block: bool) -> str:
        token: str = await settle(
            lambda inbox, future: self._native.take(inbox, future, timeout, in_block),
            self._native.leave_in_background,
        )
        return token

    async def done(self, token: str) -> bool:
        """Frees the slot of ``token``, from whichever process took it. False
        if it had expired or been freed already."""
        freed: bool = await settle(
            lambda inbox, future: self._native.done(inbox, future, token)
        )
        return freed

    async def adopt(self, token: str) -> bool:
        """Takes over keeping the slot of ``token`` alive in this process
        (see ``lockyard.redis.WaitGroup.adopt``). False if it is gone."""
        adopted: bool = await settle(
            lambda inbox, future: self._native.adopt(inbox, future, token)
        )
        return adopted

    async def wait(self, timeout: float | None = None) -> bool:
        """Waits up to ``timeout`` seconds (None: forever) until no slot is
        held. False if the timeout ran out."""
        idle: bool = await settle(
            lambda inbox, future: self._native.wait(inbox, future, timeout)
        )
        return idle

    async def count(self) -> int:
        """Live slots across every process, asked of Redis."""
        live: int = await settle(self._native.count)
        return live

    def slot(self, timeout: float | None = None) -> Slot:
        """An async context manager that takes a slot on entry (waiting up to
        ``timeout``, like ``add``) and frees it however the block ends."""
        return Slot(self, timeout)

    def healthy(self, token: str) -> bool:
        return self._native.healthy(token)

    def check_health(self, token: str) -> None:
        self._native.check_health(token)

    def fencing_token(self, token: str) -> int | None:
        return self._native.fencing_token(token)

    def __repr__(self) -> str:
        return (
            f"<lockyard.asyncio.redis.WaitGroup name={self.name!r} limit={self.limit}>"
        )


class Slot:
    """One slot of a ``WaitGroup``, taken by ``async with wg.slot() as
    slot:`` and freed when the block ends. Like the sync ``Slot``, it is
    entered once: a second ``async with`` (another task's, even while the
    first waits) raises ``lockyard.ConfigError`` instead of taking a slot
    whose token would overwrite the first's, which then stays taken."""

    def __init__(self, group: WaitGroup, timeout: float | None) -> None:
        self._group = group
        self._timeout = timeout
        self._token: str | None = None
        self._entered = False

    async def __aenter__(self) -> Self:
        if self._entered:
            raise ConfigError(
                "this slot was taken already: call wg.slot() for each `async with`"
            )
        self._entered = True
        try:
            self._token = await self._group._take(self._timeout, in_block=True)
        except BaseException:
            self._entered = False
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        token, self._token = self.token, None
        native = self._group._native
        try:
            await settle(lambda inbox, future: native.leave(inbox, future, token))
        except Error as failure:
            end_block(exc, failure)

    @property
    def token(self) -> str:
        if self._token is None:
            raise RuntimeError("the slot is taken by entering `async with wg.slot()`")
        return self._token

    @property
    def fencing_token(self) -> int | None:
        return self._group.fencing_token(self.token)

    @property
    def healthy(self) -> bool:
        return self._group.healthy(self.token)

    def check_health(self) -> None:
        self._group.check_health(self.token)
