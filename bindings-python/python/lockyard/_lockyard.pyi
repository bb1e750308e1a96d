"""The native module; use it through ``lockyard`` and ``lockyard.redis``."""

from types import TracebackType

from typing_extensions import Self, final

__all__ = [
    "RedisElection",
    "RedisLock",
    "RedisObserver",
    "RedisSession",
    "RedisTerm",
    "__version__",
    "redis_holder",
]

__version__: str

@final
class RedisLock:
    """A distributed lock on a Redis server (or Redis Cluster), exported as
    ``lockyard.redis.Lock``. Each thread is a separate holder.
    """

    def __new__(
        cls,
        url: str,
        name: str,
        ttl: float = 30.0,
        timeout: float | None = None,
        *,
        refresh_interval: float | None = None,
        max_refresh_fails: int = 3,
        identity_prefix: str | None = None,
        connect_timeout: float = 5.0,
        session: RedisSession | None = None,
        value: str | None = None,
    ) -> Self: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...
    def acquire(
        self, timeout: float | None = None, *, blocking: bool = True
    ) -> bool: ...
    def try_acquire(self) -> bool: ...
    def release(self) -> None: ...
    @property
    def healthy(self) -> bool: ...
    def check_health(self) -> None: ...
    @property
    def fencing_token(self) -> int | None: ...
    def owned(self) -> bool: ...
    def locked(self) -> bool: ...
    @property
    def name(self) -> str: ...
    @property
    def identity(self) -> str: ...

@final
class RedisSession:
    """A lease that locks and elections live under, exported as
    ``lockyard.redis.Session``; a context manager that destroys it on exit.
    """

    def __new__(
        cls,
        url: str,
        ttl: float = 15.0,
        behavior: str = "release",
        lock_delay: float = 15.0,
        *,
        connect_timeout: float = 5.0,
    ) -> Self: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...
    def destroy(self) -> None: ...
    @property
    def healthy(self) -> bool: ...
    def check_health(self) -> None: ...
    @property
    def id(self) -> str: ...
    @property
    def ttl(self) -> float: ...
    @property
    def lock_delay(self) -> float: ...
    @property
    def behavior(self) -> str: ...

@final
class RedisElection:
    """Leader election under a session, exported as ``lockyard.redis.Election``."""

    def __new__(cls, url: str, name: str, session: RedisSession) -> Self: ...
    def campaign(self, value: str, timeout: float | None = None) -> bool: ...
    def resign(self) -> None: ...
    def leader(self) -> str | None: ...
    @property
    def is_leader(self) -> bool: ...
    def check_health(self) -> None: ...
    @property
    def fencing_token(self) -> int | None: ...
    @property
    def term(self) -> int | None: ...
    @property
    def name(self) -> str: ...
    def observe(self, timeout: float | None = None) -> RedisObserver: ...

@final
class RedisObserver:
    """The changes of leadership of one election, in order."""

    def __iter__(self) -> Self: ...
    def __next__(self) -> RedisTerm: ...

@final
class RedisTerm:
    """A term begins (``value`` is the leader's) or ends (``value`` is None)."""

    @property
    def value(self) -> str | None: ...
    @property
    def fencing_token(self) -> int: ...

def redis_holder(url: str, name: str) -> str | None: ...
