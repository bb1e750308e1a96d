"""Review of b0a8d3c: a GcsLock's own logger (logger=) is filtered at the
source like the lockyard logger."""

from __future__ import annotations

import logging
import time
from typing import Any

from gcs_servers import GcsServer
from lockyard.gcs import Lock

FAST: dict[str, Any] = {"backoff_min": 0.02, "backoff_max": 0.1}


def test_a_locks_own_logger_is_filtered_at_the_source(gcs: GcsServer) -> None:
    # The lockyard logger's level becomes the log crate's max level, so a
    # disabled record costs an atomic load. A logger= sink has no filter:
    # every DEBUG step of the lock (each refresh) is formatted, queued,
    # wakes the forwarder, takes the GIL and reaches logger.log, only to
    # be discarded there -- and it takes places in the shared 1024-record
    # queue that the lockyard logger's warnings need.
    levels: list[int] = []

    class Counting(logging.Logger):
        def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
            levels.append(level)
            super().log(level, msg, *args, **kwargs)

    mine = Counting("tests.gcs.mine")
    mine.setLevel(logging.WARNING)
    lock = Lock(
        bucket_name="locks",
        path="a",
        ttl=3.0,
        refresh_interval=0.05,
        logger=mine,
        **FAST,
    )
    with lock:
        time.sleep(0.5)
    time.sleep(0.2)
    below = [level for level in levels if level < logging.WARNING]
    assert not below, f"{len(below)} records below the logger's level reached it"
