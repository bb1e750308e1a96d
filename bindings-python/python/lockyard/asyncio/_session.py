"""The asyncio Session, Election and ``exclusive`` of every backend with
sessions (Redis, etcd): their native halves are the backend's sync session
and ``AsyncElection``; a backend's module gives them constructors."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Callable, Generator, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Union

from lockyard._errors import ConfigError, Error
from lockyard._lockyard import (
    AsyncElection,
    AsyncObserver,
    EtcdSession,
    Pending,
    RedisSession,
    RedisTerm,
    end_block,
    session_destroy,
)
from lockyard.asyncio._bridge import holder, settle
from lockyard.asyncio._lock import TaskLock

if TYPE_CHECKING:
    from typing_extensions import Self

Term = RedisTerm
NativeSession = Union[RedisSession, EtcdSession]


class TaskSession:
    """A lease that locks and elections live under (see the backend's sync
    ``Session``), created and destroyed by awaiting:

    >>> async with Session(url, ttl=15.0, lock_delay=15.0) as session:
    ...     lock = Lock(url, "task-7", session=session, value="worker-3")
    >>> session = await Session(url)  # or create it without a block
    >>> await session.destroy()

    The constructor only checks its arguments' types; the session is
    created on the server (and bad values raise ``lockyard.ConfigError``)
    when it is awaited or entered. A session created once stays that one:
    awaiting it again returns it unchanged.
    """

    # The backend's native create: (inbox, future, url, ttl, behavior,
    # lock_delay, *, connect_timeout) -> Pending.
    _create: ClassVar[Callable[..., Pending]]

    def __init__(
        self,
        url: str,
        ttl: float | None = None,
        behavior: str | None = None,
        lock_delay: float | None = None,
        *,
        connect_timeout: float | None = None,
    ) -> None:
        self._options = (url, ttl, behavior, lock_delay, connect_timeout)
        self._native: NativeSession | None = None
        self._creating: asyncio.Future[NativeSession] | None = None
        self._destroyed = False

    async def create(self) -> Self:
        """Creates the session on the server, once; what ``await session``
        and ``async with session`` do."""
        if self._destroyed:
            raise ConfigError("the session was destroyed; make a new one")
        if self._native is not None:
            return self
        creating = self._creating
        if creating is None or (
            creating.done() and (creating.cancelled() or creating.exception())
        ):
            # Not started yet, or failed: (again) now.
            creating = self._creating = asyncio.ensure_future(self._new())
        # Shielded: one caller's cancellation must not end the create that
        # other callers await too (a create nobody awaits any more is kept,
        # for the next await, or destroyed with this object).
        try:
            self._native = await asyncio.shield(creating)
        except asyncio.CancelledError:
            if creating.cancelled() and self._destroyed:
                # Not this task's cancellation: destroy() ended the create.
                raise ConfigError(
                    "the session was destroyed while being created"
                ) from None
            raise
        return self

    async def _new(self) -> NativeSession:
        url, ttl, behavior, lock_delay, connect_timeout = self._options
        native: NativeSession = await settle(
            lambda inbox, future: self._create(
                inbox,
                future,
                url,
                ttl,
                behavior,
                lock_delay,
                connect_timeout=connect_timeout,
            ),
            # Created as its awaiting task was cancelled (by destroy(), say):
            # nobody will destroy it, so it is destroyed now.
            lambda native: native.destroy_in_background(),
        )
        return native

    def __await__(self) -> Generator[Any, None, Self]:
        return self.create().__await__()

    async def __aenter__(self) -> Self:
        return await self.create()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Destroys the session however the block ends; a failure to do so
        does not replace the block's exception."""
        try:
            await self.destroy()
        except Error as failure:
            end_block(exc, failure)

    async def destroy(self) -> None:
        """Frees every lock held under the session at once (no
        lock_delay), ends it on the server and stops keeping it alive.
        Idempotent. A create still under way (awaited by a task cancelled
        since, or by another task) gives up, or is destroyed once done."""
        self._destroyed = True
        creating = self._creating
        if self._native is None and creating is not None:
            creating.cancel()
            await asyncio.wait([creating])
            if not creating.cancelled() and creating.exception() is None:
                self._native = creating.result()
        if self._native is None:
            return
        native = self._native
        await settle(
            lambda inbox, future: session_destroy(inbox, future, native),
            runs_to_end=True,
        )

    @property
    def native(self) -> NativeSession:
        """The created session as the backend's sync ``Session``, for the
        sync API (``ConfigError`` before it was created)."""
        if self._native is None:
            raise ConfigError(
                "the session is not created yet: `await session` or "
                "`async with session` first"
            )
        return self._native

    @property
    def healthy(self) -> bool:
        """Whether the session is created and surely live. Reads a flag."""
        return self._native is not None and self._native.healthy

    def check_health(self) -> None:
        """Raises ``lockyard.LockUnhealthyError`` if the session was
        destroyed or may be lost, ``lockyard.ConfigError`` if it was never
        created."""
        self.native.check_health()

    @property
    def id(self) -> str:
        return self.native.id

    @property
    def ttl(self) -> float:
        return self.native.ttl

    @property
    def lock_delay(self) -> float:
        return self.native.lock_delay

    @property
    def behavior(self) -> str:
        return self.native.behavior

    def __repr__(self) -> str:
        kind = f"{type(self).__module__}.{type(self).__qualname__}"
        if self._native is None:
            return f"<{kind} not created>"
        return f"<{kind} id={self.id!r} healthy={self.healthy}>"


def native_session(session: TaskSession | NativeSession | None) -> NativeSession | None:
    """The sync session of ``session``, as the native calls take it."""
    return session.native if isinstance(session, TaskSession) else session


class TaskElection:
    """Leader election under a session (see the backend's sync ``Election``),
    campaigning, resigning and observing by awaiting. Its term is the
    process's, as in the sync class: one campaign at a time wins it.

    >>> election = Election(url, "scheduler", session=session)
    >>> if await election.campaign("node-a", timeout=10.0):
    ...     election.check_health()
    >>> async for term in election.observe(timeout=60.0):
    ...     print(term.value, term.fencing_token)
    """

    # The backend's native election: (url, name, session) -> AsyncElection.
    _make: ClassVar[Callable[[str, str, Any], AsyncElection]]

    def __init__(self, url: str, name: str, session: TaskSession | NativeSession) -> None:
        self._native = self._make(url, name, native_session(session))

    @property
    def name(self) -> str:
        return self._native.name

    async def campaign(self, value: str, timeout: float | None = None) -> bool:
        """Waits up to ``timeout`` seconds (None: forever, 0: one attempt)
        to lead with ``value``. True once leader, False if the timeout ran
        out. Cancelled, it leaves nothing held or queued."""
        won: bool = await settle(
            lambda inbox, future: self._native.campaign(inbox, future, value, timeout),
            lambda won: won and self._native.resign_in_background(),
        )
        return won

    async def resign(self) -> None:
        """Steps down (``lockyard.NotLockedError`` if not leading); the
        next campaigner takes over at once."""
        await settle(self._native.resign, runs_to_end=True)

    async def leader(self) -> str | None:
        """The current leader's value, or None when nobody leads."""
        value: str | None = await settle(self._native.leader)
        return value

    @property
    def is_leader(self) -> bool:
        """Whether this election leads and its session is surely live."""
        return self._native.is_leader()

    def check_health(self) -> None:
        """``lockyard.NotLockedError`` if not leading,
        ``lockyard.LockUnhealthyError`` if leadership may be lost."""
        self._native.check_health()

    @property
    def fencing_token(self) -> int | None:
        return self._native.fencing_token()

    @property
    def term(self) -> int | None:
        """Same as ``fencing_token``."""
        return self.fencing_token

    def observe(self, timeout: float | None = None) -> Observer:
        """An async iterator of ``Term``s: first the current state, then
        every change of leadership in order. It ends after ``timeout``
        seconds without a change (None: never)."""
        return Observer(self._native.observe(timeout))

    def __repr__(self) -> str:
        token = self.fencing_token
        leading = f" leading term={token}" if token is not None else ""
        kind = f"{type(self).__module__}.{type(self).__qualname__}"
        return f"<{kind} name={self.name!r}{leading}>"


class Observer:
    """The changes of leadership of one election, in order, for ``async
    for``. Cancelled while it waits, it loses no change."""

    def __init__(self, native: AsyncObserver) -> None:
        self._native = native
        # Changes that reached a reader cancelled as they came: the next
        # read returns them first.
        self._handed_back: collections.deque[Term] = collections.deque()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Term:
        if self._handed_back:
            return self._handed_back.popleft()
        term: Term | None = await settle(self._native.next, self._hand_back)
        if term is None:
            raise StopAsyncIteration
        return term

    def _hand_back(self, term: Term | None) -> None:
        if term is not None:
            self._handed_back.appendleft(term)


async def walk(
    lock: Callable[..., TaskLock],
    url: str,
    names: Iterable[str],
    session: TaskSession | NativeSession,
) -> AsyncIterator[str]:
    """``exclusive`` with the backend's ``Lock``: each name's lock tried
    once under ``session``, held by the iterating task while the loop body
    runs."""
    native = native_session(session)
    for name in names:
        held = lock(url, name, session=native)
        # The winner: the generator may be closed from another task.
        key = holder()
        if not await held.try_acquire():
            continue
        try:
            yield name
        except BaseException as raised:
            await held._leave(key, raised)
            raise
        await held._leave(key, None)
