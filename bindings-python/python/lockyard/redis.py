"""Primitives on a Redis server or Redis Cluster."""

from lockyard._lockyard import RedisLock as Lock

__all__ = ["Lock"]
