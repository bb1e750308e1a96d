"""lockyard.etcd.WaitGroup against a real etcd member."""

from __future__ import annotations

import threading
import time

import lockyard
import pytest
from etcd_server import Etcd
from lockyard.etcd import Slot, WaitGroup


def test_slots_are_limited_fenced_and_freed_by_token(etcd: Etcd, name: str) -> None:
    wg = WaitGroup(etcd.url, name, limit=2, ttl=5.0)
    other = WaitGroup(etcd.url, name, limit=2, ttl=5.0)
    first = wg.add()
    with wg.slot(timeout=5.0) as slot:
        assert isinstance(slot, Slot)
        assert slot.healthy and slot.fencing_token is not None
        assert slot.fencing_token > (wg.fencing_token(first) or 0)
        slot.check_health()
        assert other.count() == 2
        with pytest.raises(lockyard.TimeoutError):
            other.add(timeout=0)
        assert not other.wait(timeout=0.2)
    assert slot.fencing_token is None and not slot.healthy
    assert other.done(first) and not other.done(first)
    # The adder learns at its next keep-alive (every ttl/3) that the slot is gone.
    deadline = time.monotonic() + 5.0 / 3 + 1.0
    while wg.healthy(first):
        assert time.monotonic() < deadline, "still healthy after someone's done"
        time.sleep(0.05)
    with pytest.raises(lockyard.LockUnhealthyError):
        wg.check_health(first)
    assert not wg.done(first)
    with pytest.raises(lockyard.NotLockedError):
        wg.check_health(first)
    assert wg.wait(timeout=1.0)
    assert etcd.keys() == []
    assert repr(wg) == f'<lockyard.etcd.WaitGroup name="{name}" limit=2>'


def test_a_waiting_add_is_woken_by_done_from_another_thread(
    etcd: Etcd, name: str
) -> None:
    wg = WaitGroup(etcd.url, name, limit=1)
    token = wg.add()
    took: list[str] = []
    waiter = threading.Thread(target=lambda: took.append(wg.add(timeout=10.0)))
    waiter.start()
    time.sleep(0.3)
    assert took == []
    freed = time.monotonic()
    assert wg.done(token)
    waiter.join()
    assert time.monotonic() - freed < 2.0
    assert wg.adopt(took[0]), "adopting a slot this group holds keeps it"
    assert wg.done(took[0])
    assert not wg.adopt(took[0]), "gone once done"


@pytest.mark.parametrize(
    ("args", "options"),
    [
        (("q", 0), {}),
        (("", 1), {}),
        (("q", 1), {"ttl": 0}),
        (("q", 1), {"ttl": 1e19}),
        (("q", 1), {"connect_timeout": -1}),
    ],
)
def test_bad_options_raise_config_error_before_any_request(args, options) -> None:
    with pytest.raises(lockyard.ConfigError):
        WaitGroup("etcd://127.0.0.1:1", *args, **options)


def test_a_url_that_is_not_etcd_is_a_config_error() -> None:
    for url in ("redis://127.0.0.1:6379", "etcd://", "http://127.0.0.1:2379"):
        with pytest.raises(lockyard.ConfigError):
            WaitGroup(url, "q", limit=1)
