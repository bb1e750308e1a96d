"""A forked child starts with no slots of its own: it cannot free its
parent's slots by dropping its copy of the group."""

from __future__ import annotations

import gc
import os

import pytest
from lockyard.redis import WaitGroup
from test_lock_fork import run_in_child


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_neither_holds_nor_frees_the_parents_slots(
    url: str, name: str
) -> None:
    # The only reference, so that the child can really drop its copy (as
    # its interpreter does on a normal exit).
    groups = [WaitGroup(url, name, limit=2)]
    token = groups[0].add()

    def child() -> bool:
        holds_it = groups[0].healthy(token)
        fence = groups[0].fencing_token(token)
        groups.clear()
        gc.collect()
        return not holds_it and fence is None

    child_saw_no_slot = run_in_child(child) == 0
    assert groups[0].count() == 1, "the child freed its parent's slot"
    assert groups[0].healthy(token)
    assert child_saw_no_slot, "the child sees its parent's slot as its own"
    assert groups[0].done(token)
