"""Many processes in Python and Ruby share one lock; at most one holds it."""

from pathlib import Path

from holds import fence_decreases, overlaps

PROCESSES_PER_LANGUAGE = 3
THREADS = 3
ITERATIONS = 25


def test_processes_in_both_languages_lose_no_update(workers, tmp_path: Path):
    counter = tmp_path / "counter"
    counter.write_text("0")
    started = [
        workers.start(
            lang,
            "counter",
            "count",
            threads=THREADS,
            iterations=ITERATIONS,
            hold=0.001,
            ttl=10,
            counter=counter,
        )
        for _ in range(PROCESSES_PER_LANGUAGE)
        for lang in ("py", "rb")
    ]
    holds = [r for worker in started for r in worker.finish() if r["event"] == "hold"]

    expected = 2 * PROCESSES_PER_LANGUAGE * THREADS * ITERATIONS
    assert len(holds) == expected
    assert int(counter.read_text()) == expected, (
        "an update was lost: two holders at once"
    )
    assert overlaps(holds) == []
    assert fence_decreases(holds) == []
    assert {hold["lang"] for hold in holds} == {"py", "rb"}


def test_hold_much_longer_than_ttl_stays_exclusive(workers):
    # One pair per direction, on two names, at the same time.
    pairs = []
    for holder_lang, prober_lang in [("py", "rb"), ("rb", "py")]:
        name = f"long-{holder_lang}"
        holder = workers.start(holder_lang, name, "hold", ttl=1, hold=5)
        acquired = holder.wait_for("acquired")
        prober = workers.start(prober_lang, name, "probe", ttl=1, hold=4, interval=0.05)
        pairs.append((holder, acquired, prober))

    for holder, acquired, prober in pairs:
        holder_records = holder.finish()
        prober.finish()
        (checked,) = holder.events("checked")
        assert checked["healthy"] is True, f"{holder} lost a lock it kept refreshing"
        assert checked["check"] == "ok"
        assert checked["fence"] == acquired["fence"]
        assert checked["at"] - acquired["acquired"] >= 4.9e9
        (released,) = [
            r["released"] for r in holder_records if r["event"] == "released"
        ]
        stolen = [r for r in prober.events("acquired") if r["acquired"] < released]
        assert stolen == [], f"{prober} took the lock from a live holder"
        (probed,) = prober.events("probed")
        assert probed["attempts"] >= 20
