"""The native module; use it through ``lockyard``, ``lockyard.redis`` and
``lockyard.gcs``."""

from collections.abc import Mapping
from types import TracebackType
from typing import Any

from typing_extensions import Self, final

__all__ = ["GcsLock", "RedisLock", "__version__"]

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
    @property
    def identity(self) -> str: ...
