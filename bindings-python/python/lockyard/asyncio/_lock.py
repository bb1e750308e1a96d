"""The asyncio lock of every backend: its native half (``AsyncLock``) is
the backend's core lock; a backend's module gives it a constructor."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from lockyard._errors import Error
from lockyard._lockyard import AsyncLock, end_block
from lockyard.asyncio._bridge import holder, settle

if TYPE_CHECKING:
    from typing_extensions import Self


class TaskLock:
    """A distributed lock held per asyncio Task: two tasks sharing one lock
    object exclude each other as two processes do, and the same task
    acquiring it twice raises ``lockyard.AlreadyLockedError``. While held
    it is refreshed in the background; ``healthy`` and ``check_health()``
    tell whether it may have been lost since. It shares names, holders and
    fencing tokens with the backend's sync lock: sync and async holders
    exclude each other.
    """

    _native: AsyncLock

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
        """Releases however the block ends, cancellation included (even
        one that comes as the release begins); never replaces the block's
        exception (a failed release is noted on it)."""
        await self._leave(holder(), exc)

    async def _leave(self, key: int, exc: BaseException | None) -> None:
        """Ends the block the holder ``key`` entered."""
        try:
            await settle(
                lambda inbox, future: self._native.leave(inbox, future, key),
                runs_to_end=True,
            )
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
        await settle(
            lambda inbox, future: self._native.release(inbox, future, key),
            runs_to_end=True,
        )

    async def locked(self) -> bool:
        """Asks the server whether anyone holds the lock."""
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
        return f"<{type(self).__module__}.{type(self).__qualname__} name={self.name!r}>"
