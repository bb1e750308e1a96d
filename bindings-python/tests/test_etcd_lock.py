"""lockyard.etcd.Lock against a real etcd member."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import lockyard
import pytest
from etcd_server import Etcd
from lockyard.etcd import Lock, holder


def test_a_lock_is_held_once_with_growing_fencing_tokens(etcd: Etcd, name: str) -> None:
    first, second = Lock(etcd.url, name, ttl=5.0), Lock(etcd.url, name, ttl=5.0)
    with first:
        token = first.fencing_token
        assert first.healthy and first.owned() and first.locked()
        first.check_health()
        assert holder(etcd.url, name) == first.identity
        assert not second.try_acquire()
        assert not second.acquire(timeout=0.2)
        with pytest.raises(lockyard.AlreadyLockedError):
            first.acquire()
        assert len(etcd.keys()) == 1, etcd.keys()
    assert not first.locked() and first.fencing_token is None
    assert second.acquire(blocking=False)
    assert second.fencing_token is not None and token is not None
    assert second.fencing_token > token
    second.release()
    with pytest.raises(lockyard.NotLockedError):
        second.release()
    assert etcd.keys() == []
    assert f'<lockyard.etcd.Lock name="{name}" ' in repr(second)


def test_with_raises_lockyard_timeout_error_which_is_the_builtin_too(
    etcd: Etcd, name: str
) -> None:
    holder_lock = Lock(etcd.url, name)
    holder_lock.acquire()
    started = time.monotonic()
    with pytest.raises(lockyard.TimeoutError), Lock(etcd.url, name, timeout=0.3):
        pass
    assert time.monotonic() - started < 2
    assert issubclass(lockyard.TimeoutError, TimeoutError)


def test_threads_sharing_a_lock_never_overlap(etcd: Etcd, name: str) -> None:
    lock = Lock(etcd.url, name, ttl=5.0)
    inside, overlaps, done = [0], [0], []

    def work() -> None:
        for _ in range(5):
            with lock:
                inside[0] += 1
                overlaps[0] += inside[0] > 1
                time.sleep(0.005)
                inside[0] -= 1
        done.append(1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(done) == 4 and overlaps == [0]
    assert etcd.keys() == []


COUNTER = """
    import sys
    from pathlib import Path
    from lockyard.etcd import Lock

    url, name, path = sys.argv[1:4]
    lock = Lock(url, name, ttl=5.0)
    for _ in range(20):
        with lock:
            file = Path(path)
            file.write_text(str(int(file.read_text()) + 1))
"""


def test_a_counter_updated_under_the_lock_by_processes_loses_nothing(
    etcd: Etcd, name: str, tmp_path: Path, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    children = [spawn(COUNTER, etcd.url, name, str(counter)) for _ in range(3)]
    for child in children:
        _, stderr = child.communicate(timeout=120)
        assert child.returncode == 0, stderr
    assert counter.read_text() == "60"
    assert etcd.keys() == []


HOLD_AND_REPORT = """
    import sys
    from lockyard.etcd import Lock

    lock = Lock(sys.argv[1], sys.argv[2], ttl=2.0)
    lock.acquire()
    print(lock.fencing_token, flush=True)
    sys.stdin.readline()
"""


def test_a_killed_holder_is_freed_after_its_ttl_and_not_before(
    etcd: Etcd, name: str, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    child = spawn(HOLD_AND_REPORT, etcd.url, name)
    assert child.stdout is not None
    token = int(child.stdout.readline())
    child.kill()
    child.wait()
    killed_at = time.monotonic()
    lock = Lock(etcd.url, name, ttl=5.0)
    assert not lock.try_acquire(), "free right after the crash"
    assert lock.acquire(timeout=10)
    waited = time.monotonic() - killed_at
    assert 1.0 < waited < 5.0, waited
    assert lock.fencing_token is not None and lock.fencing_token > token


WAIT_FOREVER = """
    import sys
    from lockyard.etcd import Lock

    print("waiting", flush=True)
    with Lock(sys.argv[1], sys.argv[2]):
        print("acquired", flush=True)
"""


def test_ctrl_c_interrupts_a_wait_and_leaves_nothing_queued(
    etcd: Etcd,
    name: str,
    spawn: Callable[..., subprocess.Popen[str]],
    eventually: Callable[..., bool],
) -> None:
    holder_lock = Lock(etcd.url, name)
    holder_lock.acquire()
    child = spawn(WAIT_FOREVER, etcd.url, name)
    assert child.stdout is not None
    assert child.stdout.readline() == "waiting\n"
    assert eventually(lambda: len(etcd.keys()) == 2), etcd.keys()
    interrupted_at = time.monotonic()
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=5)
    assert time.monotonic() - interrupted_at < 1.0
    assert stderr.rstrip().endswith("KeyboardInterrupt"), stderr
    assert eventually(lambda: len(etcd.keys()) == 1), etcd.keys()
    holder_lock.release()
    assert etcd.keys() == []


@pytest.mark.parametrize(
    ("url", "name", "options"),
    [
        ("etcd://", "x", {}),
        ("redis://127.0.0.1:2379", "x", {}),
        ("etcd://127.0.0.1:1", "", {}),
        ("etcd://127.0.0.1:1", "x", {"ttl": 0}),
        ("etcd://127.0.0.1:1", "x", {"ttl": 1e19}),
        ("etcd://127.0.0.1:1", "x", {"ttl": -1.0}),
        ("etcd://127.0.0.1:1", "x", {"timeout": 1e19}),
    ],
)
def test_bad_options_raise_config_error(
    url: str, name: str, options: dict[str, float]
) -> None:
    with pytest.raises(lockyard.ConfigError):
        Lock(url, name, **options)


def test_unreachable_members_raise_backend_error_naming_them() -> None:
    lock = Lock("etcd://127.0.0.1:1,127.0.0.1:2", "x", connect_timeout=0.5)
    with pytest.raises(lockyard.BackendError, match=r"127\.0\.0\.1:1.*127\.0\.0\.1:2"):
        lock.acquire(timeout=3)
