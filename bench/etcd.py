"""The etcd lock against its floor, in one run on one private etcd member
(Debian's etcd-server): `bench/run etcd`.

- cycle: an uncontended acquire + release from Python, against the raw
  floor — the same two requests (the put-if-absent Txn on a lease, the
  compare-and-delete Txn) sent by Python's own http.client over one
  kept-alive connection to etcd's JSON gateway, the transport lockyard
  uses; python-etcd3's Lock beside it as the peer (if installed); and from
  Ruby (`--ruby "ruby -I DIR"`) against the same floor sent by Net::HTTP
  (bench/etcd_cycle.rb). Every write waits for etcd's fsync, whose time
  drifts by tens of percent over seconds: each round runs a short batch
  of each in turn, and the ratio is the median of the rounds' ratios;
- writes: Raft proposals etcd committed per uncontended cycle, and during a
  waiter's two seconds of waiting (etcd's own /metrics);
- asyncio: the same cycle through ``lockyard.asyncio.etcd.Lock`` in one
  task, against the same floor taken in the same rounds; and what 1000
  tasks waiting on one lock cost (RSS, threads, sockets: each waiting
  watch is one HTTP connection);
- handoff: from a release to the next holder's acquire returning (a waiter
  in another thread, its own Lock object), p50 against the p50 of one etcd
  Put in the same run, and against the handoff's own floor: from a raw
  delete sent to a raw watch of that key (another connection) seeing it.
  A release comes after the waiter's PAUSE in line, and etcd answers a
  write after an idle pause about twice as slowly as one right after
  another (on this VM: 1.6 ms against 0.6): the Put and the floor are
  timed after the same pause, and the back-to-back Put is printed beside.

Prints medians over a few rounds, as ratios to the floors.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1] / "bindings-python" / "tests"))
from etcd_server import Etcd
from lockyard.asyncio.etcd import Lock as AsyncLock
from lockyard.etcd import Lock

ROUNDS = 25
CYCLES = 60
HANDOFFS = 100
PAUSE = 0.02  # a waiter's time to queue behind the holder
CYCLE_TARGET = 1.10
HANDOFF_TARGET = 1.5
WAITERS = 1000


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class Raw:
    """etcd's gateway over one kept-alive connection, as lockyard uses it."""

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port)

    def call(self, path: str, body: dict) -> dict:
        self.connection.request("POST", f"/v3/{path}", json.dumps(body))
        return json.loads(self.connection.getresponse().read())

    def cycle(self, key: str, lease: int) -> None:
        taken = self.call("kv/txn", {
            "compare": [{"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": 0}],
            "success": [{"request_put": {"key": b64(key), "value": b64("x"), "lease": lease}}],
        })  # fmt: skip
        revision = int(taken["header"]["revision"])
        self.call("kv/txn", {
            "compare": [{"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": revision}],
            "success": [{"request_delete_range": {"key": b64(key)}}],
        })  # fmt: skip


def proposals(port: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port)
    connection.request("GET", "/metrics")
    for line in connection.getresponse().read().decode().splitlines():
        if line.startswith("etcd_server_proposals_committed_total "):
            return int(float(line.split()[1]))
    raise RuntimeError("etcd's /metrics has no etcd_server_proposals_committed_total")


def round_ratio(mine: list[float], floors: list[float]) -> float:
    """The median of the rounds' ratios: each round's against its own floor."""
    return statistics.median(m / f for m, f in zip(mine, floors))


def per_cycle_us(cycle, count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        cycle()
    return (time.perf_counter() - started) / count * 1e6


def handoff_p50_us(url: str) -> float:
    holder, waiter = Lock(url, "handoff", ttl=10.0), Lock(url, "handoff", ttl=10.0)
    samples = []
    for _ in range(HANDOFFS):
        holder.acquire()
        got = threading.Event()
        at: list[int] = []

        def wait(at: list[int], got: threading.Event) -> None:
            waiter.acquire()
            at.append(time.monotonic_ns())
            got.set()
            waiter.release()

        thread = threading.Thread(target=wait, args=(at, got))
        thread.start()
        time.sleep(PAUSE)  # queued behind the holder
        released = time.monotonic_ns()
        holder.release()
        got.wait(10)
        thread.join()
        samples.append((at[0] - released) / 1e3)
    return statistics.median(samples)


def watched_delete_p50_us(raw: Raw, port: int) -> float:
    """From a delete sent to a watch of its key, on another connection of
    etcd's gateway, seeing it: what any handoff over watches waits."""
    samples = []
    for i in range(HANDOFFS):
        key = b64(f"bench/watched/{i}")
        raw.call("kv/put", {"key": key, "value": b64("x")})
        body = json.dumps({"create_request": {"key": key, "filters": ["NOPUT"]}})
        watch = socket.create_connection(("127.0.0.1", port))
        watch.sendall(
            f"POST /v3/watch HTTP/1.1\r\nHost: etcd\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        seen = b""
        while b"created" not in seen:
            seen += watch.recv(65536)
        arrived: list[float] = []

        def read(watch: socket.socket = watch, arrived: list[float] = arrived) -> None:
            data = b""
            while b"DELETE" not in data:
                data += watch.recv(65536)
            arrived.append(time.perf_counter())

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(PAUSE)
        sent = time.perf_counter()
        raw.call("kv/deleterange", {"key": key})
        reader.join(10)
        watch.close()
        samples.append((arrived[0] - sent) * 1e6)
    return statistics.median(samples)


def put_p50_us(raw: Raw, pause: float) -> float:
    """One Put, each `pause` after the one before."""
    samples = []
    for i in range(HANDOFFS):
        time.sleep(pause)
        started = time.perf_counter()
        raw.call("kv/put", {"key": b64(f"bench/put/{i}"), "value": b64("x")})
        samples.append((time.perf_counter() - started) * 1e6)
    raw.call("kv/deleterange", {"key": b64("bench/"), "range_end": b64("bench0")})
    return statistics.median(samples)


def ruby_rounds(ruby: list[str], url: str) -> list[tuple[float, float]]:
    """(floor, lockyard) microseconds per cycle from Ruby, per round."""
    script = Path(__file__).resolve().parent / "etcd_cycle.rb"
    out = subprocess.run(
        [*ruby, str(script), url, "ruby", str(CYCLES), str(ROUNDS)],
        check=True,
        capture_output=True,
        text=True,
    )
    return [tuple(map(float, line.split())) for line in out.stdout.splitlines()]


def etcd3_cycle(port: int):
    """python-etcd3's Lock (a new lease per acquire, polling-free but not
    FIFO), or None when it is not installed."""
    try:
        import etcd3
    except ImportError:
        return None
    client = etcd3.client(host="127.0.0.1", port=port)
    lock = client.lock("peer", ttl=30)

    def cycle() -> None:
        lock.acquire()
        lock.release()

    return cycle


async def async_rounds(url: str, raw: Raw, lease: int) -> tuple[list[float], list[float]]:
    """Per round: the raw floor and lockyard.asyncio's cycle, in us."""
    lock = AsyncLock(url, "async-cycle", ttl=30.0)
    await lock.acquire()
    await lock.release()
    floors, ours = [], []
    for _ in range(ROUNDS):
        floors.append(per_cycle_us(lambda: raw.cycle("lockyard/raw/k", lease), CYCLES))
        started = time.perf_counter()
        for _ in range(CYCLES):
            await lock.acquire()
            await lock.release()
        ours.append((time.perf_counter() - started) / CYCLES * 1e6)
    return floors, ours


def process_figures() -> tuple[float, int, int]:
    """RSS (MiB), threads and open sockets of this process."""
    with open("/proc/self/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    fds = Path("/proc/self/fd")
    sockets = 0
    for fd in fds.iterdir():
        try:
            sockets += fd.readlink().name.startswith("socket:")
        except OSError:
            pass
    return rss / 1024, len(list(Path("/proc/self/task").iterdir())), sockets


async def waiting_cost(url: str, etcd: Etcd) -> tuple[float, int, int]:
    """What WAITERS tasks waiting on one lock add: RSS, threads, sockets."""
    lock = AsyncLock(url, "waiters", ttl=30.0)
    await lock.acquire()
    # One waiter first: the runtime and the first watch are the baseline.
    warm = asyncio.create_task(lock.acquire())
    await asyncio.sleep(0.5)
    rss, threads, sockets = process_figures()
    waiters = [asyncio.create_task(lock.acquire()) for _ in range(WAITERS)]
    # Counted on a connection of its own (etcdctl's 2 s limit is too short
    # while a thousand puts queue up).
    counter = Raw(etcd.port)
    keys = {"key": b64("lockyard/"), "range_end": b64("lockyard0"), "count_only": True}
    deadline = time.monotonic() + 60
    while int((await asyncio.to_thread(counter.call, "kv/range", keys)).get("count", 0)) < WAITERS + 2:
        assert time.monotonic() < deadline, "the waiters never queued"
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)
    after = process_figures()
    for waiter in [warm, *waiters]:
        waiter.cancel()
    await asyncio.gather(warm, *waiters, return_exceptions=True)
    await lock.release()
    return after[0] - rss, after[1] - threads, after[2] - sockets


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ruby", help='how to run Ruby with lockyard, e.g. "ruby -I DIR"')
    ruby = shlex.split(parser.parse_args().ruby or "")
    with tempfile.TemporaryDirectory(prefix="lockyard-bench-etcd-") as directory:
        etcd = Etcd(Path(directory))
        try:
            raw = Raw(etcd.port)
            lease = int(raw.call("lease/grant", {"TTL": 60})["ID"])
            lock = Lock(etcd.url, "cycle", ttl=30.0)
            lock.acquire()
            lock.release()  # the lease is granted once, not per cycle

            def lockyard_cycle() -> None:
                lock.acquire()
                lock.release()

            peer = etcd3_cycle(etcd.port)
            floors, ours, peers = [], [], []
            for _ in range(ROUNDS):
                floors.append(per_cycle_us(lambda: raw.cycle("lockyard/raw/k", lease), CYCLES))
                ours.append(per_cycle_us(lockyard_cycle, CYCLES))
                if peer:
                    peers.append(per_cycle_us(peer, CYCLES))
            rb_rounds = ruby_rounds(ruby, etcd.url) if ruby else []
            before = proposals(etcd.port)
            for _ in range(100):
                lockyard_cycle()
            writes = (proposals(etcd.port) - before) / 100

            waiter = Lock(etcd.url, "cycle", ttl=30.0)
            lock.acquire()
            def wait_then_release() -> None:
                waiter.acquire(timeout=30)
                waiter.release()

            thread = threading.Thread(target=wait_then_release)
            thread.start()
            time.sleep(0.5)  # queued
            before = proposals(etcd.port)
            time.sleep(2.0)
            waiting_writes = proposals(etcd.port) - before
            lock.release()
            thread.join()

            async_floors, async_ours = asyncio.run(async_rounds(etcd.url, raw, lease))
            waiting = asyncio.run(waiting_cost(etcd.url, etcd))

            handoffs = [handoff_p50_us(etcd.url) for _ in range(2)]
            puts = [put_p50_us(raw, PAUSE) for _ in range(2)]
            hot_puts = [put_p50_us(raw, 0) for _ in range(2)]
            watched = [watched_delete_p50_us(raw, etcd.port) for _ in range(2)]
        finally:
            etcd.stop()

    floor, mine = statistics.median(floors), statistics.median(ours)
    cycle_ratio = round_ratio(ours, floors)
    handoff, put = statistics.median(handoffs), statistics.median(puts)
    print(f"etcd {ROUNDS} rounds x {CYCLES} uncontended cycles, one local member")
    print(f"  raw floor (http.client, 2 Txns)   {floor:8.0f} us/cycle   1.00x")
    print(f"  lockyard.etcd.Lock                {mine:8.0f} us/cycle   {cycle_ratio:.2f}x"
          f"   target <= {CYCLE_TARGET:.2f}x: {'met' if cycle_ratio <= CYCLE_TARGET else 'MISSED'}")  # fmt: skip
    if peers:
        theirs = statistics.median(peers)
        peer_ratio = round_ratio(peers, floors)
        print(f"  python-etcd3 Lock (peer)          {theirs:8.0f} us/cycle   {peer_ratio:.2f}x")
    if rb_rounds:
        rb_floors, rb_ours = [f for f, _ in rb_rounds], [m for _, m in rb_rounds]
        rb_floor, rb_mine = statistics.median(rb_floors), statistics.median(rb_ours)
        rb_ratio = round_ratio(rb_ours, rb_floors)
        print(f"  Ruby raw floor (Net::HTTP)        {rb_floor:8.0f} us/cycle   1.00x")
        print(f"  Lockyard::Etcd::Lock              {rb_mine:8.0f} us/cycle   {rb_ratio:.2f}x"
              f"   target <= {CYCLE_TARGET:.2f}x: {'met' if rb_ratio <= CYCLE_TARGET else 'MISSED'}")  # fmt: skip
    async_ratio = round_ratio(async_ours, async_floors)
    print(f"  asyncio: raw floor in its rounds  {statistics.median(async_floors):8.0f} us/cycle   1.00x")
    print(f"  lockyard.asyncio.etcd.Lock        {statistics.median(async_ours):8.0f} us/cycle"
          f"   {async_ratio:.2f}x (sync above: {cycle_ratio:.2f}x)")  # fmt: skip
    grown, threads, sockets = waiting
    print(f"  {WAITERS} asyncio tasks waiting on one lock: RSS +{grown:.1f} MiB"
          f" ({grown * 1024 / WAITERS:.1f} KiB each), threads +{threads}, sockets +{sockets}")
    print(f"  Raft writes per uncontended cycle  {writes:.2f}   target 2")
    print(f"  Raft writes by a waiter in 2 s     {waiting_writes}   target 0")
    ratio, hot_put = handoff / put, statistics.median(hot_puts)
    print(f"  handoff p50 {handoff:.0f} us, one Put p50 {put:.0f} us after the same"
          f" {PAUSE * 1e3:.0f} ms pause: {ratio:.2f}x"
          f"   target <= {HANDOFF_TARGET:.1f}x: {'met' if ratio <= HANDOFF_TARGET else 'MISSED'}")  # fmt: skip
    print(f"    (one Put p50 right after another {hot_put:.0f} us: handoff {handoff / hot_put:.2f}x it)")
    floor_handoff = statistics.median(watched)
    print(f"  handoff floor (raw delete seen by a raw watch) p50 {floor_handoff:.0f} us"
          f" = {floor_handoff / put:.2f}x one Put; lockyard's handoff {handoff / floor_handoff:.2f}x it")  # fmt: skip


if __name__ == "__main__":
    main()
