"""Primitives on a Redis server or Redis Cluster."""

from lockyard._lockyard import RedisLock as Lock
from lockyard._lockyard import RedisSlot as Slot
from lockyard._lockyard import RedisWaitGroup as WaitGroup

__all__ = ["Lock", "Slot", "WaitGroup"]
