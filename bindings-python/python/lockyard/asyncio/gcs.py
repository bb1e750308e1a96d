"""The asyncio twin of ``lockyard.gcs``: a lock on an object in a Google
Cloud Storage bucket, held per asyncio Task.

>>> lock = Lock(bucket_name="my-bucket", path="locks/deploy", ttl=300.0)
>>> async with lock:
...     lock.check_health()
"""

from __future__ import annotations

import logging
from typing import Any

from lockyard._lockyard import async_gcs_lock
from lockyard.asyncio._lock import TaskLock

__all__ = ["Lock"]


class Lock(TaskLock):
    """A distributed lock on one object in a Google Cloud Storage bucket,
    held per asyncio Task (see ``lockyard.gcs.Lock`` for the options and
    the algorithm). It shares objects and holders with
    ``lockyard.gcs.Lock``: sync and async holders exclude each other. A
    waiting task holds no thread: each look at the object runs on
    lockyard's own threads, and the pauses between looks on the loop.
    ``name`` is the object's path.
    """

    def __init__(
        self,
        bucket_name: str,
        path: str,
        *,
        instance_identity_prefix: str | None = None,
        thread_safe: bool = True,
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
        logger: logging.Logger | logging.LoggerAdapter[Any] | None = None,
    ) -> None:
        """Validates every option without sending a request: bad values
        raise ``lockyard.ConfigError``. ``timeout`` is the wait of ``async
        with lock:`` (None: forever). With ``thread_safe=False`` the whole
        process is one holder, as in the sync lock."""
        self._native = async_gcs_lock(
            bucket_name,
            path,
            instance_identity_prefix=instance_identity_prefix,
            thread_safe=thread_safe,
            ttl=ttl,
            refresh_interval=refresh_interval,
            max_refresh_fails=max_refresh_fails,
            backoff_min=backoff_min,
            backoff_max=backoff_max,
            backoff_multiplier=backoff_multiplier,
            object_acl=object_acl,
            cloud_storage_options=cloud_storage_options,
            cloud_storage_bucket_options=cloud_storage_bucket_options,
            timeout=timeout,
            logger=logger,
        )
