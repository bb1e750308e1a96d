"""The asyncio wait group of every backend: its native half
(``AsyncWaitGroup``) is the backend's core group; a backend's module gives
it a constructor."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from lockyard._errors import ConfigError, Error
from lockyard._lockyard import AsyncWaitGroup, end_block
from lockyard.asyncio._bridge import settle

if TYPE_CHECKING:
    from typing_extensions import Self


class TaskGroup:
    """At most ``limit`` holders at a time across every process, with Go's
    WaitGroup shape, for asyncio: ``add``/``done``/``wait``, and ``async
    with wg.slot():``. Slots belong to the process, by token, as in the
    backend's sync ``WaitGroup``, with which it shares names and slots.
    """

    _native: AsyncWaitGroup

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
            lambda inbox, future: self._native.done(inbox, future, token),
            runs_to_end=True,
        )
        return freed

    async def adopt(self, token: str) -> bool:
        """Takes over keeping the slot of ``token`` alive in this process
        (see the sync ``WaitGroup.adopt``). False if it is gone."""
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
        """Live slots across every process, asked of the server."""
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
        kind = f"{type(self).__module__}.{type(self).__qualname__}"
        return f"<{kind} name={self.name!r} limit={self.limit}>"


class Slot:
    """One slot of a ``WaitGroup``, taken by ``async with wg.slot() as
    slot:`` and freed when the block ends. Like the sync ``Slot``, it is
    entered once: a second ``async with`` (another task's, even while the
    first waits) raises ``lockyard.ConfigError`` instead of taking a slot
    whose token would overwrite the first's, which then stays taken."""

    def __init__(self, group: TaskGroup, timeout: float | None) -> None:
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
            await settle(
                lambda inbox, future: native.leave(inbox, future, token),
                runs_to_end=True,
            )
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
