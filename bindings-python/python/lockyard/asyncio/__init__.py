"""lockyard for asyncio: the classes of the sync API with coroutines where
the sync call waits or talks to a server. Each asyncio Task is a holder, as
each thread is in the sync API; a waiting coroutine holds no thread and
never blocks the event loop (its wait runs on lockyard's own runtime), and
cancelling a task in ``acquire`` or inside ``async with`` leaves nothing
held or queued.

>>> from lockyard.asyncio.redis import Lock
>>> async with Lock(url, "deploy", ttl=30.0) as lock:
...     lock.check_health()  # no I/O: stays sync

Sync and async holders of one name exclude each other and queue in one
line, in arrival order.

``lockyard.asyncio.redis`` has the Redis ``Lock``, ``WaitGroup``,
``Session``, ``Election`` and ``exclusive``; ``lockyard.asyncio.quorum``
the quorum ``RwLock``; ``lockyard.asyncio.gcs`` the GCS ``Lock``;
``lockyard.asyncio.etcd`` the etcd ``Lock`` and ``WaitGroup``.
"""
