"""Processes in Python and Ruby share a GCS lock on fake-gcs-server."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import Workers
from gcs_servers import GcsServer, start_fake_gcs
from holds import overlaps


@pytest.fixture(scope="module")
def fake_gcs() -> Iterator[GcsServer]:
    server = start_fake_gcs()
    yield server
    server.stop()


@pytest.fixture
def gcs_workers(
    fake_gcs: GcsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Workers]:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.host)
    started = Workers(SimpleNamespace(url="gs://locks"), tmp_path)  # type: ignore[arg-type]
    yield started
    started.stop_all()


def test_processes_in_both_languages_lose_no_update(
    gcs_workers: Workers, tmp_path: Path
) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    started = [
        gcs_workers.start(
            lang,
            "counter",
            "count",
            threads=2,
            iterations=6,
            hold=0.001,
            ttl=10,
            counter=counter,
        )
        for _ in range(2)
        for lang in ("py", "rb")
    ]
    holds = [r for w in started for r in w.finish() if r["event"] == "hold"]
    assert len(holds) == 48
    assert int(counter.read_text()) == 48, "an update was lost: two holders at once"
    assert overlaps(holds) == []
    assert {hold["lang"] for hold in holds} == {"py", "rb"}


@pytest.mark.parametrize(("holder_lang", "waiter_lang"), [("py", "rb"), ("rb", "py")])
def test_a_killed_holder_is_recovered_after_its_ttl_not_before(
    gcs_workers: Workers, holder_lang: str, waiter_lang: str
) -> None:
    ttl = 2.0
    holder = gcs_workers.start(
        holder_lang, f"killed-{holder_lang}", "hold", ttl=ttl, hold=60
    )
    holder.wait_for("acquired")
    time.sleep(0.5)
    holder.signal(signal.SIGKILL)
    killed = time.monotonic_ns()
    waiter = gcs_workers.start(
        waiter_lang, f"killed-{holder_lang}", "wait", ttl=ttl, hold=0, timeout=10
    )
    (hold,) = [r for r in waiter.finish() if r["event"] == "hold"]
    waited = (hold["acquired"] - killed) / 1e9
    # Its last refresh was at most ttl/9 before the kill; `Date` has whole
    # seconds, so recovery may be up to a second late, never early.
    assert ttl * 8 / 9 - 0.1 <= waited <= ttl + 1.5, waited


def test_a_hold_much_longer_than_its_ttl_stays_exclusive(gcs_workers: Workers) -> None:
    pairs = []
    for holder_lang, prober_lang in [("py", "rb"), ("rb", "py")]:
        name = f"long-{holder_lang}"
        holder = gcs_workers.start(holder_lang, name, "hold", ttl=1, hold=4)
        acquired = holder.wait_for("acquired")
        prober = gcs_workers.start(
            prober_lang, name, "probe", ttl=1, hold=3, interval=0.1
        )
        pairs.append((holder, acquired, prober))
    for holder, acquired, prober in pairs:
        holder.finish()
        prober.finish()
        (checked,) = holder.events("checked")
        assert checked["healthy"] is True and checked["check"] == "ok"
        assert checked["at"] - acquired["acquired"] >= 3.9e9
        (released,) = [
            r["released"] for r in holder.records if r["event"] == "released"
        ]
        stolen = [r for r in prober.events("acquired") if r["acquired"] < released]
        assert stolen == [], f"{prober} took the lock from a live holder"
