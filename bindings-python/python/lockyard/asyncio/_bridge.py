"""How ``lockyard.asyncio`` awaits the core: a native call starts the core's
``_async`` future on lockyard's runtime and hands it an asyncio future,
which the running loop settles when the eventfd of its ``Completions``
turns readable. Also the holder key of the calling task.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import weakref
from collections.abc import Callable
from typing import Any

from lockyard._lockyard import Completions, Pending

_numbers = itertools.count(1)
_keys: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = weakref.WeakKeyDictionary()
# Each loop's inbox, held (strongly) only by the loop's reader: a strong
# value here would keep the loop alive through the futures waiting in its
# inbox (future -> task -> coroutine -> loop), so that a loop closed with
# outcomes unread would never be freed, nor would those outcomes be given
# back.
_inboxes: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, weakref.ReferenceType[Completions]
] = weakref.WeakKeyDictionary()
_inboxes_lock = threading.Lock()

Start = Callable[[Completions, "asyncio.Future[Any]"], Pending]


def holder() -> int:
    """The calling task's holder key, unique for the life of the process: a
    task's ``id()`` may come back for a new task once it ended, and must not
    hand that one its holds.
    """
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("lockyard.asyncio calls must run inside an asyncio Task")
    key = _keys.get(task)
    if key is None:
        key = _keys[task] = next(_numbers)
    return key


def _inbox(loop: asyncio.AbstractEventLoop) -> Completions:
    """The loop's ``Completions``, watched by the loop from its first use."""
    with _inboxes_lock:
        known = _inboxes.get(loop)
        inbox = known() if known is not None else None
        if inbox is None:
            inbox = Completions()
            loop.add_reader(inbox.fileno(), inbox.drain)
            _inboxes[loop] = weakref.ref(inbox)
        return inbox


def _drain_now(loop: asyncio.AbstractEventLoop) -> None:
    """Settles what the loop's inbox holds now, as its reader would."""
    with _inboxes_lock:
        known = _inboxes.get(loop)
    inbox = known() if known is not None else None
    if inbox is not None:
        with contextlib.suppress(Exception):
            inbox.drain()


async def settle(
    start: Start,
    undo: Callable[[Any], None] | None = None,
    *,
    runs_to_end: bool = False,
) -> Any:
    """Starts a core future with ``start(inbox, future)`` and awaits its
    outcome. Cancelled meanwhile, the core future is dropped (and gives up
    whatever it waited for) — unless it ``runs_to_end`` (a release, which
    must happen even if its task was cancelled before it even began); an
    outcome that arrived but was never seen by this task (cancelled just
    after) is given back with ``undo``.
    """
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    # Not kept in this frame: a frame holding its inbox would keep it, and
    # what it holds, alive with a coroutine its closed loop never ends.
    pending = start(_inbox(loop), future)
    try:
        return await future
    except BaseException:
        if future.done() and not future.cancelled() and future.exception() is None:
            if undo is not None:
                undo(future.result())
        else:
            if not runs_to_end:
                pending.cancel()
            # A coroutine finalized after its loop closed cannot schedule
            # the future's callbacks; the inbox gives its outcome back.
            if not loop.is_closed():
                future.cancel()
                # An outcome already in the inbox is given back now, not at
                # the loop's next read: the task may acquire again at once.
                _drain_now(loop)
        raise
