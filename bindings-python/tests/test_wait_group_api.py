"""The shape of `lockyard.redis.WaitGroup`: add/done/wait/count, and
`with wg.slot() as slot:` freeing its slot however the block ends."""

from __future__ import annotations

import builtins
import threading
import time
import uuid
from collections.abc import Callable

import lockyard
import pytest
from lockyard.redis import Slot, WaitGroup
from redis_server import Redis


def test_wait_group_lives_in_lockyard_redis() -> None:
    for cls, name in [(WaitGroup, "WaitGroup"), (Slot, "Slot")]:
        assert cls.__name__ == name
        assert cls.__module__ == "lockyard.redis"
    assert WaitGroup.__text_signature__ == (
        "(url, name, limit, ttl=30.0, *, refresh_interval=None,"
        " max_refresh_fails=3, connect_timeout=5.0)"
    )


def test_add_takes_slots_up_to_the_limit_and_done_frees_them(
    url: str, name: str
) -> None:
    wg = WaitGroup(url, name, limit=2, ttl=5.0)
    first, second = wg.add(), wg.add(timeout=0)
    assert uuid.UUID(first) and uuid.UUID(second) and first != second
    assert wg.count() == 2
    with pytest.raises(lockyard.TimeoutError, match=name) as raised:
        wg.add(timeout=0)
    assert isinstance(raised.value, builtins.TimeoutError)
    assert wg.count() == 2

    assert wg.done(first) is True
    assert wg.count() == 1
    assert wg.done(first) is False  # freed already
    third = wg.add(timeout=0)
    assert wg.done(second) is True
    assert wg.done(third) is True
    assert wg.count() == 0


def test_add_waits_for_a_slot_and_times_out(url: str, name: str) -> None:
    wg = WaitGroup(url, name, limit=1)
    held = wg.add()
    started = time.monotonic()
    with pytest.raises(lockyard.TimeoutError):
        wg.add(timeout=0.3)
    assert 0.25 < time.monotonic() - started < 1.0
    assert wg.count() == 1

    # A waiter gets the slot as soon as it is freed.
    threading.Timer(0.2, wg.done, [held]).start()
    started = time.monotonic()
    token = wg.add(timeout=5.0)
    assert 0.15 < time.monotonic() - started < 0.5
    assert wg.done(token)


def test_done_of_unknown_or_malformed_tokens_is_false(url: str, name: str) -> None:
    wg = WaitGroup(url, name, limit=1)
    held = wg.add()
    for token in [str(uuid.uuid4()), "", "not a token", "*", held + "x"]:
        assert wg.done(token) is False
    assert wg.count() == 1
    assert wg.done(held)


def test_tokens_are_per_process_not_per_thread(url: str, name: str) -> None:
    wg = WaitGroup(url, name, limit=1)
    token = wg.add()
    seen: dict[str, object] = {}

    def other_thread() -> None:
        seen["healthy"] = wg.healthy(token)
        seen["done"] = wg.done(token)

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen == {"healthy": True, "done": True}
    assert wg.count() == 0


def test_health_and_fencing_of_a_token(url: str, name: str) -> None:
    wg = WaitGroup(url, name, limit=2)
    first, second = wg.add(), wg.add()
    assert wg.healthy(first)
    wg.check_health(first)
    fences = [wg.fencing_token(first), wg.fencing_token(second)]
    assert all(isinstance(fence, int) for fence in fences)
    assert fences[1] > fences[0]  # type: ignore[operator]
    wg.done(first)
    wg.done(second)
    assert not wg.healthy(first)
    assert wg.fencing_token(first) is None
    with pytest.raises(lockyard.NotLockedError, match=first):
        wg.check_health(first)


def test_slot_holds_a_slot_inside_the_block(url: str, name: str) -> None:
    wg = WaitGroup(url, name, limit=3)
    slot = wg.slot(timeout=1.0)
    assert "not taken yet" in repr(slot)
    with slot as entered:
        assert entered is slot
        assert uuid.UUID(slot.token)
        assert slot.healthy
        slot.check_health()
        assert slot.fencing_token == wg.fencing_token(slot.token)
        assert slot.token in repr(slot)
        assert wg.count() == 1
    assert wg.count() == 0
    assert not slot.healthy
    assert slot.fencing_token is None
    with pytest.raises(lockyard.NotLockedError):
        slot.check_health()


def test_a_slot_frees_on_exception_break_and_return(url: str, name: str) -> None:
    wg = WaitGroup(url, name, limit=1)
    with pytest.raises(KeyError), wg.slot():
        raise KeyError("boom")
    assert wg.count() == 0

    for _ in range(3):
        with wg.slot():
            break
    assert wg.count() == 0

    def token() -> str:
        with wg.slot() as slot:
            return slot.token

    assert wg.done(token()) is False  # freed already by the return
    assert wg.count() == 0


def test_a_slot_times_out_like_add(url: str, name: str) -> None:
    wg = WaitGroup(url, name, limit=1)
    with wg.slot():
        slot = wg.slot(timeout=0.1)
        with pytest.raises(lockyard.TimeoutError), slot:
            pytest.fail("entered a slot beyond the limit")
        with pytest.raises(lockyard.NotLockedError):
            _ = slot.token
    assert wg.count() == 0


def test_a_slot_is_entered_once(url: str, name: str) -> None:
    wg = WaitGroup(url, name, limit=2)
    slot = wg.slot()
    with slot:
        with pytest.raises(lockyard.ConfigError, match="wg.slot()"), slot:
            pass
        assert wg.count() == 1
    with pytest.raises(lockyard.ConfigError), slot:
        pass
    assert wg.count() == 0


def test_wait_returns_once_no_slot_is_held(url: str, name: str) -> None:
    wg = WaitGroup(url, name, limit=3)
    assert wg.wait() is True  # nothing held
    tokens = [wg.add(), wg.add()]
    assert wg.wait(timeout=0.2) is False
    for delay, token in zip([0.1, 0.3], tokens):
        threading.Timer(delay, wg.done, [token]).start()
    started = time.monotonic()
    assert wg.wait(timeout=5.0) is True
    assert 0.25 < time.monotonic() - started < 0.6
    assert wg.count() == 0


def test_a_dropped_group_leaves_its_added_slots_to_run_out(
    url: str, name: str, eventually: Callable[..., bool]
) -> None:
    wg = WaitGroup(url, name, limit=2, ttl=0.6)
    wg.add()
    wg.add()
    del wg  # or the process exits: a worker may still run on a handed-off token
    observer = WaitGroup(url, name, limit=2)
    assert observer.count() == 2
    assert eventually(lambda: observer.count() == 0, timeout=2.0)


def test_properties_and_repr(url: str, name: str) -> None:
    wg = WaitGroup(url, name, 4)
    assert wg.name == name
    assert wg.limit == 4
    assert repr(wg) == f'<lockyard.redis.WaitGroup name="{name}" limit=4>'


def test_nothing_but_the_fencing_counter_is_left(redis: Redis, name: str) -> None:
    wg = WaitGroup(redis.url, name, limit=2, ttl=5.0)
    with wg.slot(), wg.slot():
        with pytest.raises(lockyard.TimeoutError):
            wg.add(timeout=0.1)
        assert wg.wait(timeout=0.1) is False
    assert wg.wait() is True
    fence = f"lockyard:{{{name}}}:fence"
    assert redis.keys() == [fence]
    ttl = redis.command("PTTL", fence)
    assert isinstance(ttl, int) and ttl > 0
