"""The native module; use it through ``lockyard``, ``lockyard.redis``,
``lockyard.etcd``, ``lockyard.gcs`` and ``lockyard.quorum``.

Durations are seconds (int or float). ``ttl``, ``lock_delay``,
``refresh_interval``, ``connect_timeout`` and the GCS request timeout and
backoff are at most 30 days; a wait's ``timeout`` is at most 100 years, and
``None`` waits forever. NaN, negative, infinite or larger values raise
``lockyard.ConfigError`` when given."""

import logging
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from typing_extensions import Self, final

__all__ = [
    "AsyncElection",
    "AsyncLock",
    "AsyncObserver",
    "AsyncRwLock",
    "AsyncWaitGroup",
    "Completions",
    "EtcdElection",
    "EtcdLock",
    "EtcdSession",
    "EtcdWaitGroup",
    "GcsLock",
    "QuorumRwLock",
    "RedisClaim",
    "RedisElection",
    "RedisLock",
    "RedisObserver",
    "RedisSession",
    "RedisSlot",
    "RedisTerm",
    "RedisWaitGroup",
    "__version__",
    "async_etcd_election",
    "async_etcd_lock",
    "async_etcd_wait_group",
    "async_gcs_lock",
    "async_quorum_rw_lock",
    "async_redis_election",
    "async_redis_lock",
    "async_redis_wait_group",
    "end_block",
    "etcd_claim",
    "etcd_holder",
    "etcd_session_create",
    "redis_claim",
    "redis_holder",
    "redis_session_create",
    "run_command",
    "session_destroy",
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
class EtcdLock:
    """A distributed lock on etcd, exported as ``lockyard.etcd.Lock``. Each
    thread is a separate holder; waiters are served in arrival order; the
    fencing token is the create revision of the holder's key.
    """

    def __new__(
        cls,
        url: str,
        name: str,
        ttl: float = 30.0,
        timeout: float | None = None,
        *,
        identity_prefix: str | None = None,
        connect_timeout: float = 5.0,
        session: EtcdSession | None = None,
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
class RedisWaitGroup:
    """At most ``limit`` holders at a time across every process, on a Redis
    server (or Redis Cluster), exported as ``lockyard.redis.WaitGroup``.
    Slots belong to the process: ``done(token)`` works from any thread or
    process, and ``adopt(token)`` moves a slot's lease to the process that
    works on it. Dropping the group or exiting never frees ``add()``ed
    slots: they run out after ``ttl`` unless adopted.
    """

    def __new__(
        cls,
        url: str,
        name: str,
        limit: int,
        ttl: float = 30.0,
        *,
        refresh_interval: float | None = None,
        max_refresh_fails: int = 3,
        connect_timeout: float = 5.0,
    ) -> Self: ...
    def add(self, timeout: float | None = None) -> str: ...
    def done(self, token: str) -> bool: ...
    def adopt(self, token: str) -> bool: ...
    def slot(self, timeout: float | None = None) -> RedisSlot: ...
    def wait(self, timeout: float | None = None) -> bool: ...
    def count(self) -> int: ...
    def healthy(self, token: str) -> bool: ...
    def check_health(self, token: str) -> None: ...
    def fencing_token(self, token: str) -> int | None: ...
    @property
    def name(self) -> str: ...
    @property
    def limit(self) -> int: ...

@final
class EtcdWaitGroup:
    """At most ``limit`` holders at a time across every process, on etcd,
    exported as ``lockyard.etcd.WaitGroup``. Slots are the ``limit`` oldest
    keys of the name (FIFO; fencing token = the key's create revision) and
    belong to the process, as with ``lockyard.redis.WaitGroup``.
    """

    def __new__(
        cls,
        url: str,
        name: str,
        limit: int,
        ttl: float = 30.0,
        *,
        connect_timeout: float = 5.0,
    ) -> Self: ...
    def add(self, timeout: float | None = None) -> str: ...
    def done(self, token: str) -> bool: ...
    def adopt(self, token: str) -> bool: ...
    def slot(self, timeout: float | None = None) -> RedisSlot: ...
    def wait(self, timeout: float | None = None) -> bool: ...
    def count(self) -> int: ...
    def healthy(self, token: str) -> bool: ...
    def check_health(self, token: str) -> None: ...
    def fencing_token(self, token: str) -> int | None: ...
    @property
    def name(self) -> str: ...
    @property
    def limit(self) -> int: ...

@final
class RedisSlot:
    """One slot of a wait group (of either backend), taken by ``with
    wg.slot() as slot:`` and freed when the block ends; exported as
    ``lockyard.redis.Slot`` and ``lockyard.etcd.Slot``.
    """

    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...
    @property
    def token(self) -> str: ...
    @property
    def fencing_token(self) -> int | None: ...
    @property
    def healthy(self) -> bool: ...
    def check_health(self) -> None: ...

@final
class QuorumRwLock:
    """A read/write lock over N independent Redis servers, exported as
    ``lockyard.quorum.RwLock``. Each thread is a separate holder.
    """

    def __new__(
        cls,
        urls: Sequence[str],
        name: str,
        ttl: float = 30.0,
        timeout: float | None = None,
        *,
        refresh_interval: float | None = None,
        max_refresh_fails: int = 3,
        connect_timeout: float = 5.0,
    ) -> Self: ...
    def write(self) -> _Held: ...
    def read(self) -> _Held: ...
    def acquire_write(self, timeout: float | None = None) -> bool: ...
    def acquire_read(self, timeout: float | None = None) -> bool: ...
    def release(self) -> None: ...
    @property
    def healthy(self) -> bool: ...
    def check_health(self) -> None: ...
    @property
    def fencing_token(self) -> int | None: ...
    @property
    def nodes(self) -> list[str]: ...
    @property
    def name(self) -> str: ...

@final
class _Held:
    """What ``QuorumRwLock.write()`` and ``read()`` return: a context
    manager holding the lock for its block."""

    def __enter__(self) -> QuorumRwLock: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

@final
class GcsLock:
    """A distributed lock on an object in a Google Cloud Storage bucket,
    exported as ``lockyard.gcs.Lock``. Each thread is a separate holder
    unless ``thread_safe=False``.
    """

    def __new__(
        cls,
        bucket_name: str,
        path: str,
        *,
        instance_identity_prefix: str | None = None,
        thread_safe: bool = True,
        ttl: float = 300.0,
        refresh_interval: float | None = None,
        max_refresh_fails: int = 3,
        backoff_min: float = 1.0,
        backoff_max: float = 30.0,
        backoff_multiplier: float = 2.0,
        object_acl: str | None = None,
        cloud_storage_options: Mapping[str, Any] | None = None,
        cloud_storage_bucket_options: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
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
    def unlock(self) -> bool: ...
    def abandon(self) -> bool: ...
    @property
    def healthy(self) -> bool: ...
    def check_health(self) -> None: ...
    @property
    def last_refresh_error(self) -> str | None: ...
    @property
    def fencing_token(self) -> int | None: ...
    def owned(self) -> bool: ...
    def locked(self) -> bool: ...
    def owned_according_to_server(self) -> bool: ...
    def locked_according_to_server(self) -> bool: ...
    def owned_according_to_internal_state(self) -> bool: ...
    def locked_according_to_internal_state(self) -> bool: ...
    @property
    def ttl(self) -> float: ...
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
    def destroy_in_background(self) -> None: ...
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
class EtcdSession:
    """An etcd lease that locks and elections live under, exported as
    ``lockyard.etcd.Session``; a context manager that destroys it on exit.
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
    def destroy_in_background(self) -> None: ...
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
class EtcdElection:
    """Leader election on etcd under a session, exported as
    ``lockyard.etcd.Election``: the methods of ``lockyard.redis.Election``;
    the fencing token is the create revision of the leader's key.
    """

    def __new__(cls, url: str, name: str, session: EtcdSession) -> Self: ...
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
    """The changes of leadership of one election (of either backend), in
    order; exported as ``lockyard.redis.Observer`` and
    ``lockyard.etcd.Observer``.
    """

    def __iter__(self) -> Self: ...
    def __next__(self) -> RedisTerm: ...

@final
class RedisTerm:
    """A term begins (``value`` is the leader's) or ends (``value`` is
    None); exported as ``lockyard.redis.Term`` and ``lockyard.etcd.Term``.
    """

    @property
    def value(self) -> str | None: ...
    @property
    def fencing_token(self) -> int: ...

@final
class RedisClaim:
    """A task ``exclusive`` won (on either backend): its lock, held until
    ``__exit__``."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

def etcd_claim(url: str, name: str, session: EtcdSession) -> RedisClaim | None: ...
def etcd_holder(url: str, name: str) -> str | None: ...
def redis_claim(url: str, name: str, session: RedisSession) -> RedisClaim | None: ...
def redis_holder(url: str, name: str) -> str | None: ...
def run_command(args: list[str]) -> int: ...
def _defaults() -> dict[str, dict[str, Any]]:
    """The core's constructor defaults, by class; for the tests."""

# The native halves of ``lockyard.asyncio`` (see ``lockyard/asyncio/``):
# each coroutine call starts a core future and settles ``future`` through
# ``inbox``, the running loop's ``Completions``.

@final
class Completions:
    """One asyncio loop's inbox of finished core futures, an eventfd the
    loop watches with ``add_reader(inbox.fileno(), inbox.drain)``."""

    def __new__(cls) -> Self: ...
    def fileno(self) -> int: ...
    def drain(self) -> None: ...

@final
class Pending:
    """A core future in flight; ``cancel()`` drops it."""

    def cancel(self) -> None: ...

def async_redis_lock(
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
) -> AsyncLock: ...
def async_etcd_lock(
    url: str,
    name: str,
    ttl: float | None = None,
    timeout: float | None = None,
    *,
    identity_prefix: str | None = None,
    connect_timeout: float | None = None,
    session: EtcdSession | None = None,
    value: str | None = None,
) -> AsyncLock: ...
def async_gcs_lock(
    bucket_name: str,
    path: str,
    *,
    instance_identity_prefix: str | None = None,
    thread_safe: bool | None = None,
    ttl: float | None = None,
    refresh_interval: float | None = None,
    max_refresh_fails: int | None = None,
    backoff_min: float | None = None,
    backoff_max: float | None = None,
    backoff_multiplier: float | None = None,
    object_acl: str | None = None,
    cloud_storage_options: dict[str, Any] | None = None,
    cloud_storage_bucket_options: dict[str, Any] | None = None,
    timeout: float | None = None,
    logger: Any | None = None,
) -> AsyncLock: ...
@final
class AsyncLock:
    """The native half of ``lockyard.asyncio``'s locks, of every backend."""

    @property
    def name(self) -> str: ...
    def enter(self, inbox: Completions, future: Any, key: int) -> Pending: ...
    def acquire(
        self, inbox: Completions, future: Any, key: int, timeout: float | None
    ) -> Pending: ...
    def release(self, inbox: Completions, future: Any, key: int) -> Pending: ...
    def leave(self, inbox: Completions, future: Any, key: int) -> Pending: ...
    def leave_in_background(self, key: int) -> None: ...
    def locked(self, inbox: Completions, future: Any) -> Pending: ...
    def healthy(self, key: int) -> bool: ...
    def check_health(self, key: int) -> None: ...
    def fencing_token(self, key: int) -> int | None: ...
    def identity(self, key: int) -> str: ...

def async_quorum_rw_lock(
    urls: Sequence[str],
    name: str,
    ttl: float | None = None,
    timeout: float | None = None,
    *,
    refresh_interval: float | None = None,
    max_refresh_fails: int | None = None,
    connect_timeout: float | None = None,
) -> AsyncRwLock: ...
@final
class AsyncRwLock:
    """The native half of ``lockyard.asyncio.quorum.RwLock``."""

    @property
    def name(self) -> str: ...
    @property
    def nodes(self) -> list[str]: ...
    def enter(self, inbox: Completions, future: Any, key: int, write: bool) -> Pending: ...
    def acquire(
        self,
        inbox: Completions,
        future: Any,
        key: int,
        write: bool,
        timeout: float | None,
    ) -> Pending: ...
    def release(self, inbox: Completions, future: Any, key: int) -> Pending: ...
    def leave(self, inbox: Completions, future: Any, key: int) -> Pending: ...
    def leave_in_background(self, key: int) -> None: ...
    def fencing_token(self, inbox: Completions, future: Any, key: int) -> Pending: ...
    def healthy(self, key: int) -> bool: ...
    def check_health(self, key: int) -> None: ...
    def held(self, key: int) -> bool: ...

def async_redis_wait_group(
    url: str,
    name: str,
    limit: int,
    ttl: float | None = None,
    *,
    refresh_interval: float | None = None,
    max_refresh_fails: int | None = None,
    connect_timeout: float | None = None,
) -> AsyncWaitGroup: ...
def async_etcd_wait_group(
    url: str,
    name: str,
    limit: int,
    ttl: float | None = None,
    *,
    connect_timeout: float | None = None,
) -> AsyncWaitGroup: ...
@final
class AsyncWaitGroup:
    @property
    def name(self) -> str: ...
    @property
    def limit(self) -> int: ...
    def take(
        self, inbox: Completions, future: Any, timeout: float | None, in_block: bool
    ) -> Pending: ...
    def done(self, inbox: Completions, future: Any, token: str) -> Pending: ...
    def adopt(self, inbox: Completions, future: Any, token: str) -> Pending: ...
    def leave(self, inbox: Completions, future: Any, token: str) -> Pending: ...
    def leave_in_background(self, token: str) -> None: ...
    def wait(
        self, inbox: Completions, future: Any, timeout: float | None
    ) -> Pending: ...
    def count(self, inbox: Completions, future: Any) -> Pending: ...
    def healthy(self, token: str) -> bool: ...
    def check_health(self, token: str) -> None: ...
    def fencing_token(self, token: str) -> int | None: ...

def redis_session_create(
    inbox: Completions,
    future: Any,
    url: str,
    ttl: float | None = None,
    behavior: str | None = None,
    lock_delay: float | None = None,
    *,
    connect_timeout: float | None = None,
) -> Pending: ...
def etcd_session_create(
    inbox: Completions,
    future: Any,
    url: str,
    ttl: float | None = None,
    behavior: str | None = None,
    lock_delay: float | None = None,
    *,
    connect_timeout: float | None = None,
) -> Pending: ...
def session_destroy(
    inbox: Completions, future: Any, session: RedisSession | EtcdSession
) -> Pending: ...
def async_redis_election(url: str, name: str, session: RedisSession) -> AsyncElection: ...
def async_etcd_election(url: str, name: str, session: EtcdSession) -> AsyncElection: ...
@final
class AsyncElection:
    @property
    def name(self) -> str: ...
    def campaign(
        self, inbox: Completions, future: Any, value: str, timeout: float | None
    ) -> Pending: ...
    def resign(self, inbox: Completions, future: Any) -> Pending: ...
    def resign_in_background(self) -> None: ...
    def leader(self, inbox: Completions, future: Any) -> Pending: ...
    def is_leader(self) -> bool: ...
    def check_health(self) -> None: ...
    def fencing_token(self) -> int | None: ...
    def observe(self, timeout: float | None = None) -> AsyncObserver: ...

@final
class AsyncObserver:
    def next(self, inbox: Completions, future: Any) -> Pending: ...

def end_block(exc: BaseException | None, failure: BaseException) -> None: ...
