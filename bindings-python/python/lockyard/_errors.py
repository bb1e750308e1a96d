"""The exceptions lockyard raises; the native module looks them up here."""

from __future__ import annotations

import builtins


class Error(Exception):
    """Base of every lockyard error."""


class TimeoutError(Error, builtins.TimeoutError):
    """The wait for a lock ran out (``with lock:`` with a ``timeout``)."""


class AlreadyLockedError(Error):
    """This thread already holds the lock: locks are not re-entrant."""


class NotLockedError(Error):
    """Release or health check of a lock this thread does not hold."""


class LockUnhealthyError(Error):
    """The lock may have been lost: its lease ran out, another holder took
    over, or refreshing it failed too often. Stop touching what it protects.
    """


class ConfigError(Error, ValueError):
    """A bad argument, rejected before anything touched a server."""


class BackendError(Error):
    """The server could not be asked (connection, protocol, auth); the
    message names the server and the operation.
    """
