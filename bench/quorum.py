"""dsync's published experiment, scaled to this machine, for the quorum
RwLock: lock+unlock cycles per second across worker processes for 4, 8,
12 and 16 local redis-servers, and uncontended lock+unlock latency on 5
nodes as a multiple of the single-node raw floor measured in the same run
(redis-py SET NX PX + compare-and-delete); pottery's Redlock on the same
nodes side by side. Run by bench/run quorum (or directly in a venv with
lockyard, redis and pottery installed).

    python bench/quorum.py
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cycle import COMPARE_AND_DELETE

from bench import RedisServer

ROUNDS = 5
LATENCY_CYCLES = 1000
NODE_COUNTS = (4, 8, 12, 16)
WORKERS = 4
THROUGHPUT_SECONDS = 2.0
# Target from the quorum issue: 5-node p50 within this multiple of the floor.
LATENCY_TARGET = 2.5
# dsync's README, c3.2xlarge (8 vCPU) per node, one machine per node.
DSYNC_TOTAL = {4: 12972, 8: 15920, 12: 16782, 16: 19096}


def cycles(what: str, urls: list[str], key: str):
    """A function doing one lock+unlock of `what` on `urls`."""
    import redis

    if what == "floor":
        client = redis.Redis.from_url(urls[0])
        sha = client.script_load(COMPARE_AND_DELETE)

        def floor() -> None:
            if not client.set(key, "token", nx=True, px=30_000):
                raise RuntimeError("the key was taken")
            if client.evalsha(sha, 1, key, "token") != 1:
                raise RuntimeError("the key was lost")

        return floor
    if what == "floor-5-asyncio":
        # The same two commands on every node at once (redis-py asyncio):
        # what fanning out costs on this machine before any lock logic.
        import asyncio

        import redis.asyncio

        loop = asyncio.new_event_loop()
        clients = [redis.asyncio.Redis.from_url(url) for url in urls]
        shas = [
            loop.run_until_complete(c.script_load(COMPARE_AND_DELETE)) for c in clients
        ]

        async def both() -> None:
            await asyncio.gather(
                *(c.set(key, "token", nx=True, px=30_000) for c in clients)
            )
            await asyncio.gather(
                *(c.evalsha(sha, 1, key, "token") for c, sha in zip(clients, shas))
            )

        return lambda: loop.run_until_complete(both())
    if what in ("lockyard-write", "lockyard-read"):
        from lockyard.quorum import RwLock

        lock = RwLock(urls, key, ttl=30.0)
        acquire = lock.acquire_write if what == "lockyard-write" else lock.acquire_read

        def quorum() -> None:
            if not acquire():
                raise RuntimeError("not acquired")
            lock.release()

        return quorum
    if what == "pottery":
        from pottery import Redlock

        masters = [redis.Redis.from_url(url) for url in urls]
        redlock = Redlock(key=key, masters=masters, auto_release_time=30)

        def pottery() -> None:
            if not redlock.acquire():
                raise RuntimeError("not acquired")
            redlock.release()

        return pottery
    raise ValueError(what)


def worker(what: str, urls: list[str], key: str, seconds: float, mode: str) -> None:
    """Prints per-cycle µs (latency) or the cycles done in `seconds`."""
    cycle = cycles(what, urls, key)
    for _ in range(50):  # connect, load scripts
        cycle()
    if mode == "latency":
        times = []
        for _ in range(LATENCY_CYCLES):
            started = time.perf_counter()
            cycle()
            times.append((time.perf_counter() - started) * 1e6)
        print(json.dumps(times))
        return
    done, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        cycle()
        done += 1
    print(done)


def run_worker(what: str, urls: list[str], key: str, mode: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, "--worker", what, mode, key, str(THROUGHPUT_SECONDS),
         *urls],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def latency(urls: list[str]) -> dict[str, tuple[float, float]]:
    """Median over rounds of each contender's p50 and p99, in µs."""
    contenders = [
        "floor",
        "floor-5-asyncio",
        "lockyard-write",
        "lockyard-read",
        "pottery",
    ]
    p50s = {c: [] for c in contenders}
    p99s = {c: [] for c in contenders}
    for round_ in range(ROUNDS):
        for what in contenders:
            process = run_worker(what, urls, f"lat-{what}-{round_}", "latency")
            times = json.loads(process.communicate()[0])
            p50s[what].append(percentile(times, 0.5))
            p99s[what].append(percentile(times, 0.99))
    return {
        c: (statistics.median(p50s[c]), statistics.median(p99s[c])) for c in contenders
    }


def throughput(urls: list[str], what: str) -> float:
    """Cycles/s of WORKERS processes, each on its own lock name."""
    processes = [
        run_worker(what, urls, f"tp-{what}-{i}", "throughput") for i in range(WORKERS)
    ]
    return sum(int(p.communicate()[0]) for p in processes) / THROUGHPUT_SECONDS


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        what, mode, key, seconds, *urls = sys.argv[2:]
        worker(what, urls, key, float(seconds), mode)
        return
    argparse.ArgumentParser(description=__doc__).parse_args()
    print(f"quorum bench: {os.cpu_count()} CPUs, {WORKERS} worker processes, "
          f"{ROUNDS} rounds, medians", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        servers = []
        try:
            for i in range(max(NODE_COUNTS)):
                node_dir = Path(directory) / f"node{i}"
                node_dir.mkdir()
                servers.append(RedisServer(str(node_dir)))
            urls = [server.url for server in servers]

            lat = latency(urls[:5])
            floor = lat["floor"][0]
            print("\nuncontended lock+unlock, 5 nodes (floor: 1 node, redis-py)")
            print(f"{'':22}{'p50 µs':>10}{'p99 µs':>10}{'p50/floor':>11}")
            for what, (p50, p99) in lat.items():
                print(f"{what:22}{p50:10.1f}{p99:10.1f}{p50 / floor:10.2f}x")
            ratio = lat["lockyard-write"][0] / floor
            verdict = "ok" if ratio <= LATENCY_TARGET else "MISSED"
            print(f"target: lockyard-write p50 <= {LATENCY_TARGET}x floor: "
                  f"{ratio:.2f}x {verdict}")  # fmt: skip

            print(f"\nthroughput, lock+unlock/s, {WORKERS} processes on distinct names")
            print(f"{'nodes':>5}{'lockyard':>10}{'per node':>10}{'pottery':>10}"
                  f"{'dsync*':>9}")  # fmt: skip
            for count in NODE_COUNTS:
                ours = statistics.median(
                    throughput(urls[:count], "lockyard-write") for _ in range(3)
                )
                peer = throughput(urls[:count], "pottery")
                print(f"{count:5}{ours:10.0f}{ours / count:10.0f}{peer:10.0f}"
                      f"{DSYNC_TOTAL[count]:9}")  # fmt: skip
            print(
                "* dsync's README: total locks/s, each node a separate 8-core "
                "c3.2xlarge; here all nodes and clients share this machine"
            )
        finally:
            for server in servers:
                server.stop()


if __name__ == "__main__":
    main()
