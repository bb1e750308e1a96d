"""A read/write lock over N independent Redis servers (minio's dsync):
many readers or one writer, granted by a quorum of the servers, so it keeps
working while up to ⌊(n−1)/2⌋ of them are down.

>>> from lockyard.quorum import RwLock
>>> lock = RwLock(["redis://a:6379", "redis://b:6379", "redis://c:6379"], "index")
>>> with lock.write():
...     lock.check_health()
"""

from lockyard._lockyard import QuorumRwLock as RwLock

__all__ = ["RwLock"]
