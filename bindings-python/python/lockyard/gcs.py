"""A lock on an object in a Google Cloud Storage bucket."""

from lockyard._lockyard import GcsLock as Lock

__all__ = ["Lock"]
