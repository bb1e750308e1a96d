"""The walk of ``exclusive``, shared by the backends: each passes its own
native ``claim``, the one step that decides anything."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from lockyard._lockyard import RedisClaim

Session = TypeVar("Session")


def walk(
    claim: Callable[[str, str, Session], RedisClaim | None],
    url: str,
    names: Iterable[str],
    session: Session,
) -> Iterator[str]:
    """Yields each name whose ``claim`` this worker won, holding its lock
    while the loop body runs."""
    for name in names:
        won = claim(url, name, session)
        if won is None:
            continue
        # Ends the task's block as `with` would: in a process forked inside
        # it the lock is the parent's and stays held, and a failing release
        # does not replace what the loop body raised. GeneratorExit means
        # the loop broke: an orderly exit, whose failing release raises.
        try:
            yield name
        except GeneratorExit:
            won.__exit__(None, None, None)
            raise
        except BaseException as raised:
            won.__exit__(type(raised), raised, raised.__traceback__)
            raise
        won.__exit__(None, None, None)
