"""A forked child starts with no holds of its own and a working library."""

from __future__ import annotations

import os
from collections.abc import Callable

import lockyard
import pytest
from lockyard.redis import Lock


def run_in_child(child: Callable[[], bool]) -> int:
    """Forks; the child runs `child()` and exits 0 if it returned True."""
    pid = os.fork()
    if pid == 0:
        code = 2  # whatever child() raises, never return into pytest
        try:
            code = 0 if child() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_neither_holds_nor_releases_the_parents_lock(
    url: str, name: str
) -> None:
    parents = Lock(url, name)
    parents.acquire()
    parents_token = parents.fencing_token

    def child() -> bool:
        other = Lock(url, f"{name}-child")
        with other:
            fenced = other.fencing_token is not None and other.owned()
        try:
            parents.release()
        except lockyard.NotLockedError:
            refused = True
        else:
            refused = False
        return fenced and refused and parents.fencing_token is None and parents.locked()

    assert run_in_child(child) == 0
    assert parents.owned()
    assert parents.healthy
    assert parents.fencing_token == parents_token
    parents.release()
    assert not parents.locked()
