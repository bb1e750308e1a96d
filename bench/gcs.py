"""The GCS lock's request economy, measured on the faithful test server
(tests/faithful_gcs.py, which counts requests per operation):

- requests per uncontended lock + unlock cycle (target: 2, create + delete);
- what a waiter sends per second of waiting (target: 0 writes after its
  first attempt, at most 1 read per backoff step);
- handoff delay: from the holder's unlock returning to the waiter's lock
  returning, for several backoff settings (it is about half a backoff step);
- asyncio (``lockyard.asyncio.gcs``): the same cycle's requests and time
  beside the sync one's, and what 100 tasks waiting on one lock cost: OS
  threads added to the process, RSS growth, and the loop's longest pause.

    python bench/gcs.py [--rounds N]

Needs lockyard installed for this Python (scripts/setup or bench/run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from lockyard.asyncio.gcs import Lock as AsyncLock
from lockyard.gcs import Lock

ROOT = Path(__file__).resolve().parent.parent


class Server:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "faithful_gcs.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.host = f"127.0.0.1:{self.process.stdout.readline().split()[1]}"

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(f"http://{self.host}/_stats") as reply:
            return dict(json.load(reply))

    def stop(self) -> None:
        self.process.kill()
        self.process.communicate()


def diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {op: after[op] - before[op] for op in after}


def lock(server: Server, path: str, **options: Any) -> Lock:
    return Lock(
        bucket_name="locks",
        path=path,
        cloud_storage_options={"emulator_host": server.host},
        **options,
    )


def uncontended(server: Server, cycles: int) -> tuple[float, float]:
    subject = lock(server, "cycle")
    before = server.stats()
    started = time.perf_counter()
    for _ in range(cycles):
        subject.acquire()
        subject.release()
    elapsed = time.perf_counter() - started
    requests = sum(diff(server.stats(), before).values())
    return requests / cycles, elapsed / cycles * 1e3


class StepCounter(logging.Handler):
    """Counts a waiter's backoff steps: it logs each one at INFO."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.steps = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.steps += record.getMessage().startswith("Unable to acquire lock")


def waiting(
    server: Server, backoff: tuple[float, float], seconds: float
) -> dict[str, float]:
    """A waiter against a lock held for `seconds`; its requests, per second."""
    holder = lock(server, "held", ttl=60.0)
    holder.acquire()
    waiter = lock(server, "held", backoff_min=backoff[0], backoff_max=backoff[1])
    counter = StepCounter()
    logger = logging.getLogger("lockyard")
    logger.addHandler(counter)
    logger.setLevel(logging.INFO)
    before = server.stats()
    try:
        assert not waiter.acquire(timeout=seconds)
    finally:
        logger.removeHandler(counter)
    spent = diff(server.stats(), before)
    holder.release()
    writes_after_first = spent["create"] - 1 + spent["update"] + spent["delete"]
    return {
        "reads/s": spent["get"] / seconds,
        "writes/s": writes_after_first / seconds,
        # One read inspects the holder after the first, failed create.
        "reads/step": (spent["get"] - 1) / max(counter.steps, 1),
    }


def handoff(server: Server, backoff: tuple[float, float], hold: float) -> float:
    """Seconds from the holder's release to the waiter holding it."""
    holder = lock(server, "handoff", ttl=60.0)
    waiter = lock(server, "handoff", backoff_min=backoff[0], backoff_max=backoff[1])
    holder.acquire()
    acquired: list[float] = []

    def wait() -> None:
        waiter.acquire()
        acquired.append(time.monotonic())
        waiter.release()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(hold)
    holder.release()
    released = time.monotonic()
    thread.join()
    return acquired[0] - released


def async_lock(server: Server, path: str, **options: Any) -> AsyncLock:
    return AsyncLock(
        bucket_name="locks",
        path=path,
        cloud_storage_options={"emulator_host": server.host},
        **options,
    )


def async_uncontended(server: Server, cycles: int) -> tuple[float, float]:
    async def cycle() -> tuple[float, float]:
        subject = async_lock(server, "async-cycle")
        before = server.stats()
        started = time.perf_counter()
        for _ in range(cycles):
            await subject.acquire()
            await subject.release()
        elapsed = time.perf_counter() - started
        requests = sum(diff(server.stats(), before).values())
        return requests / cycles, elapsed / cycles * 1e3

    return asyncio.run(cycle())


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def async_waiters(server: Server, tasks: int) -> dict[str, float]:
    """`tasks` tasks waiting about 3 s on a held lock: threads and RSS
    they add, and the loop's longest pause between 10 ms ticks meanwhile."""

    async def wait() -> dict[str, float]:
        holder = lock(server, "async-held", ttl=60.0)
        holder.acquire()
        # Slow polls: the test server answers one request at a time.
        shared = async_lock(server, "async-held", backoff_min=1.0, backoff_max=2.0)
        gaps: list[float] = []

        async def ticker() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticking = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.2)
        threads, rss = os_threads(), rss_kib()
        waiters = []
        for _ in range(tasks):
            # Staggered: the test server listens with a backlog of 5.
            waiters.append(asyncio.ensure_future(shared.acquire(timeout=4.0)))
            await asyncio.sleep(0.01)
        await asyncio.sleep(1.5)
        added_threads, added_rss = os_threads() - threads, rss_kib() - rss
        results = await asyncio.gather(*waiters)
        ticking.cancel()
        holder.release()
        assert not any(results)
        return {
            "threads": added_threads,
            "rss_mib": added_rss / 1024,
            "longest_gap_ms": max(gaps) * 1e3,
        }

    return asyncio.run(wait())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    server = Server()
    try:
        per_cycle, ms = uncontended(server, 50)
        print(
            f"uncontended lock+unlock: {per_cycle:.2f} requests per cycle "
            f"(target 2), {ms:.2f} ms per cycle on localhost"
        )
        print()
        header = (
            f"{'backoff min..max (s)':>22} {'reads/s waiting':>16} "
            f"{'reads/step':>11} {'writes/s waiting':>17} "
            f"{'handoff p50 (s)':>16} {'max (s)':>8}"
        )
        print(header)
        print("-" * len(header))
        for backoff in [(0.01, 0.05), (0.05, 0.25), (0.2, 1.0), (1.0, 30.0)]:
            rates = waiting(server, backoff, seconds=3.0)
            delays = [handoff(server, backoff, hold=2.0) for _ in range(args.rounds)]
            print(
                f"{f'{backoff[0]:g}..{backoff[1]:g}':>22} {rates['reads/s']:>16.1f} "
                f"{rates['reads/step']:>11.2f} {rates['writes/s']:>17.2f} "
                f"{statistics.median(delays):>16.3f} "
                f"{max(delays):>8.3f}"
            )
        print()
        print("multiplier 2 (the default): waits grow from min toward max, so reads")
        print("per second of waiting fall as a wait goes on; writes stay 0 (a waiter")
        print("creates only after a read found the object gone or stale).")
        print()
        per_cycle, async_ms = async_uncontended(server, 50)
        print(
            f"asyncio lock+unlock: {per_cycle:.2f} requests per cycle, "
            f"{async_ms:.2f} ms per cycle ({async_ms / ms:.2f}x the sync cycle above)"
        )
        cost = async_waiters(server, 100)
        print(
            f"100 asyncio tasks waiting on one lock: {cost['threads']:+.0f} OS threads, "
            f"{cost['rss_mib']:+.1f} MiB RSS, the loop's longest pause "
            f"{cost['longest_gap_ms']:.1f} ms (ticks every 10 ms)"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
