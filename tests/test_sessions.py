"""Job servers in Python and Ruby share twelve tasks under their sessions
(the source's scenario); one is killed mid-task. Every task completes
exactly once, on one server at a time; the killed server's task comes free
after ttl + lock_delay and not before; servers keep their tasks however
long past ttl they run; nothing but expiring keys is left in Redis."""

import signal
import time

TTL = 0.5
LOCK_DELAY = 0.6
WORK = 0.7  # longer than the TTL: a live server keeps its task anyway
TASKS = 12


def test_job_servers_run_every_task_exactly_once_despite_a_kill(
    workers, redis_server, tmp_path
):
    done = tmp_path / "done"
    done.mkdir()
    options = {"tasks": TASKS, "work": WORK, "ttl": TTL, "lock_delay": LOCK_DELAY}
    servers = [
        workers.start_job_server(lang, f"{lang}-{i}", done=done, **options)
        for i, lang in enumerate(["py", "rb", "py", "rb"])
    ]
    victim = servers[1]
    victim.wait_for("start")
    victim.wait_for("start")  # mid-run, in its second task
    victim.signal(signal.SIGKILL)
    victim.process.wait()
    killed_at = time.monotonic_ns()
    orphan = victim.events("start")[-1]["task"]

    reports = [r for server in servers[::2] + servers[3:] for r in server.finish()]
    starts = [r for r in reports if r["event"] == "start"]
    dones = [r for r in reports if r["event"] == "done"]

    # Every task finished exactly once, and by whom the file says.
    finished = [r["task"] for r in dones + victim.events("done")]
    assert sorted(finished) == [f"task-{i:02}" for i in range(1, TASKS + 1)]
    for r in dones:
        assert (done / r["task"]).read_text() == r["server"]

    # One server at a time per task: a task's runs never overlap.
    runs = {}
    for r in sorted(starts + victim.events("start"), key=lambda r: r["at"]):
        ended = [
            d["at"]
            for d in dones
            if (d["task"], d["server"]) == (r["task"], r["server"])
            and d["at"] > r["at"]
        ]
        end = min(ended) if ended else killed_at
        for other_start, other_end in runs.get(r["task"], []):
            assert end <= other_start or r["at"] >= other_end, (
                f"{r['task']} ran twice at once"
            )
        runs.setdefault(r["task"], []).append((r["at"], end))

    # The killed server's task: picked up after its lease + lock_delay.
    picked = [r for r in starts if r["task"] == orphan]
    assert len(picked) == 1, f"{orphan} picked up {len(picked)} times"
    waited = (picked[0]["at"] - killed_at) / 1e9
    assert TTL / 2 + LOCK_DELAY - 0.05 <= waited <= TTL + LOCK_DELAY + 1.0, waited

    # The survivors destroyed their sessions; the victim's keys ran out.
    time.sleep(TTL + LOCK_DELAY)
    left = redis_server.keys()
    for key in left:
        assert key.endswith((":fence", ":value")), f"{key} left behind"
        assert int(redis_server.cli("PTTL", key)) > 0, key
