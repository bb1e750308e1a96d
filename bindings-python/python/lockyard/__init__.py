"""Distributed locks that stay correct under crashes, pauses and network
faults. A holder's lease runs on the server's clock and is refreshed in the
background; every grant carries a fencing token that only increases.

>>> from lockyard.redis import Lock
>>> with Lock("redis://127.0.0.1:6379/0", "deploy", ttl=30.0) as lock:
...     lock.check_health()  # before each step that must not run twice

Log records (refresh failures, lost locks) go to the ``lockyard`` logger.
"""

from lockyard._errors import (
    AlreadyLockedError,
    BackendError,
    ConfigError,
    Error,
    LockUnhealthyError,
    NotLockedError,
    TimeoutError,
)
from lockyard._lockyard import __version__

__all__ = [
    "AlreadyLockedError",
    "BackendError",
    "ConfigError",
    "Error",
    "LockUnhealthyError",
    "NotLockedError",
    "TimeoutError",
    "__version__",
]
