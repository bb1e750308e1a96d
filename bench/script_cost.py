"""Where an uncontended lock cycle's time inside redis-server goes: the
command time (INFO commandstats) of lockyard's acquire and release scripts,
as the library assembles them from core/src/redis/scripts, beside
redis-py's Lock and beside scripts that each do less, so that what every
part costs shows as a difference. One call at a time, as a client that
waits for each answer sends them, on a private redis-server; medians of a
few rounds.

    bench/.venv/bin/python bench/script_cost.py
"""

import statistics
import sys
import tempfile
import uuid
from pathlib import Path

import redis

from bench import RedisServer

SCRIPTS = Path(__file__).resolve().parent.parent / "core/src/redis/scripts"
ROUNDS = 5
CALLS = 2000
NAMES = 100


def assemble(body_file: str) -> str:
    """A script as scripts.rs assembles it: the prelude's first lines, the
    body's fast path, the rest of the prelude, the rules, the rest of the
    body."""
    body = (SCRIPTS / body_file).read_text()
    fast, rest = body.split("-- [rules]\n", 1) if "-- [rules]\n" in body else ("", body)
    head, prelude = (SCRIPTS / "prelude.lua").read_text().split("-- [fast path]\n", 1)
    return head + fast + prelude + (SCRIPTS / "rules.lua").read_text() + rest


ACQUIRE = assemble("acquire.lua")
FAST_EXISTS = (
    "redis.call('EXISTS', holders, prefix .. 'shape', prefix .. 'queue', prefix .. 'delay',\n"
    "    prefix .. 'value', prefix .. 'watchers', prefix .. 'wake:' .. ARGV[3] .. ':gone') == 0"
)
FENCE_GET = "math.max(tonumber(redis.call('GET', fence_key) or '0') + 1, "
FENCE_SET = "redis.call('SET', fence_key, fence_text, 'PX', string.format('%d', ttl_ms + 3600000))"
CLOCK = "local clock = redis.call('TIME')"
for part in (FAST_EXISTS, FENCE_GET, FENCE_SET, CLOCK):
    assert part in ACQUIRE, f"acquire.lua changed: {part!r} is gone"
COMPARE_AND_DELETE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end"
)

# Each: (label, script text or None for a plain SET NX PX, and whether the
# row is a whole cycle with its release).
ROWS = [
    ("redis-py Lock: SET NX PX + compare-and-delete script", None, True),
    ("lockyard: acquire + release scripts", ACQUIRE, True),
    ("  acquire script alone", ACQUIRE, False),
    ("  ... without the fencing token (GET + SET of :fence)",
     ACQUIRE.replace(FENCE_GET, "math.max(0, ").replace(FENCE_SET, ""), False),
    ("  ... without reading the clock (TIME)",
     ACQUIRE.replace(CLOCK, "local clock = {'1700000000', '0'}"), False),
    ("  ... checking one key, not seven (EXISTS)",
     ACQUIRE.replace(FAST_EXISTS, "redis.call('EXISTS', holders) == 0"), False),
    ("a script doing only SET NX PX, same keys and arguments",
     ("return redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[4]) "
      "and {1, 0, 0, 0} or {0}"), False),
    ("a script doing nothing (return 1), same keys and arguments",
     "return 1", False),
]  # fmt: skip


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="lockyard-bench-") as directory:
        server = RedisServer(directory)
        try:
            measure(redis.Redis(port=server.port))
        finally:
            server.stop()


def measure(client: redis.Redis) -> None:
    release = client.register_script(assemble("release.lua"))
    compare_and_delete = client.register_script(COMPARE_AND_DELETE)
    scripts = {label: text and client.register_script(text) for label, text, _ in ROWS}

    def cycles(label: str, with_release: bool) -> None:
        script = scripts[label]
        for call in range(CALLS):
            name = f"cost-{call % NAMES}"
            keys = [f"lockyard:{{{name}}}:", f"lockyard:{{{name}}}:holders"]
            token = uuid.uuid4().hex
            if script is None:
                client.set(name, token, nx=True, px=30000)
                compare_and_delete(keys=[name], args=[token])
                continue
            script(keys=keys, args=[1, 0, token, 30000, 0, 2000, "", 1])
            if with_release:
                release(keys=keys, args=[1, 0, token])
            else:
                client.delete(keys[1])

    # Every row in each round, so that the machine's drift shows in all.
    per_call: dict[str, list[float]] = {label: [] for label, _, _ in ROWS}
    for _ in range(ROUNDS):
        for label, _, with_release in ROWS:
            cycles(label, with_release)
            client.config_resetstat()
            cycles(label, with_release)
            stats = client.info("commandstats")
            # A script's own commands are counted inside it as well.
            sent = ["cmdstat_evalsha"] + ["cmdstat_set"] * (scripts[label] is None)
            per_call[label].append(
                sum(stats[k]["usec"] for k in sent if k in stats) / CALLS
            )
    medians = {label: statistics.median(runs) for label, runs in per_call.items()}

    floor = medians[ROWS[0][0]]
    print(f"µs inside redis-server per call or cycle, one call at a time "
          f"(medians of {ROUNDS} rounds of {CALLS}); × = redis-py Lock's cycle")  # fmt: skip
    for label, _, _ in ROWS:
        print(f"  {label:62s} {medians[label]:6.1f}  {medians[label] / floor:5.2f}×")


if __name__ == "__main__":
    sys.exit(main())
