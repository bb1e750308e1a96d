"""The asyncio twin of ``lockyard.quorum``: a read/write lock over N
independent Redis servers, granted by a quorum of them, held per asyncio
Task.

>>> lock = RwLock(["redis://a:6379", "redis://b:6379", "redis://c:6379"], "index")
>>> async with lock.write():
...     lock.check_health()
>>> async with lock.read():
...     ...
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from lockyard._errors import Error
from lockyard._lockyard import AsyncRwLock, async_quorum_rw_lock, end_block
from lockyard.asyncio._bridge import holder, settle

__all__ = ["RwLock"]


class RwLock:
    """A read/write lock over N independent Redis servers: many readers or
    one writer, granted by a quorum of the servers, so it keeps working
    while up to ⌊(n−1)/2⌋ of them are down (see ``lockyard.quorum.RwLock``
    for the options and the algorithm). Each asyncio Task is a holder: two
    tasks sharing one lock object exclude each other as two processes do,
    and a task that holds it (read or write) and asks again gets
    ``lockyard.AlreadyLockedError``. It shares grants with the sync lock:
    sync and async holders exclude each other. A waiting task holds no
    thread: the requests run on lockyard's own runtime.
    """

    def __init__(
        self,
        urls: Sequence[str],
        name: str,
        ttl: float | None = None,
        timeout: float | None = None,
        *,
        refresh_interval: float | None = None,
        max_refresh_fails: int | None = None,
        connect_timeout: float | None = None,
    ) -> None:
        """Validates every option without touching a server: bad values (no
        URLs, more than 32, one server twice) raise ``lockyard.ConfigError``.
        ``timeout`` is the wait of ``async with lock.write():`` and
        ``async with lock.read():`` (None: forever)."""
        self._native: AsyncRwLock = async_quorum_rw_lock(
            urls,
            name,
            ttl,
            timeout,
            refresh_interval=refresh_interval,
            max_refresh_fails=max_refresh_fails,
            connect_timeout=connect_timeout,
        )

    @property
    def name(self) -> str:
        return self._native.name

    @property
    def nodes(self) -> list[str]:
        """The servers' URLs, as given."""
        return self._native.nodes

    def write(self) -> _Held:
        """An async context manager that holds the write lock for its
        block, waiting with the constructor's ``timeout``
        (``lockyard.TimeoutError`` when it runs out)."""
        return _Held(self, write=True)

    def read(self) -> _Held:
        """An async context manager that holds a read lock for its block,
        like ``write()``."""
        return _Held(self, write=False)

    async def acquire_write(self, timeout: float | None = None) -> bool:
        """Waits up to ``timeout`` seconds (None: forever, 0: one attempt)
        for the write lock. True if acquired, False if the timeout ran out."""
        return await self._acquire(True, timeout)

    async def acquire_read(self, timeout: float | None = None) -> bool:
        """Waits up to ``timeout`` seconds for a read lock, like
        ``acquire_write``."""
        return await self._acquire(False, timeout)

    async def _acquire(self, write: bool, timeout: float | None) -> bool:
        key = holder()

        def give_back(acquired: bool) -> None:
            if acquired:
                self._native.leave_in_background(key)

        acquired: bool = await settle(
            lambda inbox, future: self._native.acquire(inbox, future, key, write, timeout),
            give_back,
        )
        return acquired

    async def release(self) -> None:
        """Releases this task's read or write lock
        (``lockyard.NotLockedError`` if it holds none). If the lock had
        been lost meanwhile, logs a warning on the ``lockyard`` logger."""
        key = holder()
        await settle(
            lambda inbox, future: self._native.release(inbox, future, key),
            runs_to_end=True,
        )

    @property
    def healthy(self) -> bool:
        """Whether this task holds the lock and its lease is surely live on
        a quorum. Reads a flag: cheap enough for a hot loop."""
        return self._native.healthy(holder())

    def check_health(self) -> None:
        """Raises ``lockyard.LockUnhealthyError`` if this task's hold may be
        lost, ``lockyard.NotLockedError`` if it holds nothing."""
        self._native.check_health(holder())

    def owned(self) -> bool:
        """Whether this task holds the lock (read or write), as this
        process knows it (no I/O)."""
        return self._native.held(holder())

    async def fencing_token(self) -> int | None:
        """This task's write lock's fencing token, strictly increasing
        across all write holders; None for a read lock or when not held.
        A coroutine, unlike the sync lock's property: the first read per
        grant records it on a quorum (one round trip)."""
        key = holder()
        token: int | None = await settle(
            lambda inbox, future: self._native.fencing_token(inbox, future, key)
        )
        return token

    def __repr__(self) -> str:
        nodes = len(self._native.nodes)
        return f"<lockyard.asyncio.quorum.RwLock name={self.name!r} nodes={nodes}>"


class _Held:
    """What ``RwLock.write()`` and ``RwLock.read()`` return: holds the lock
    for an ``async with`` block and releases it however the block ends."""

    def __init__(self, lock: RwLock, *, write: bool) -> None:
        self._lock = lock
        self._write = write

    async def __aenter__(self) -> RwLock:
        native, write, key = self._lock._native, self._write, holder()
        await settle(
            lambda inbox, future: native.enter(inbox, future, key, write),
            lambda _: native.leave_in_background(key),
        )
        return self._lock

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Releases however the block ends, cancellation included; never
        replaces the block's exception (a failed release is noted on it).
        In a process forked inside the block it leaves the parent's hold
        alone."""
        native, key = self._lock._native, holder()
        try:
            await settle(
                lambda inbox, future: native.leave(inbox, future, key),
                runs_to_end=True,
            )
        except Error as failure:
            end_block(exc, failure)
