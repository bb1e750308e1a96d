"""What `lockyard lock NAME -- true` costs over running `true` alone, per
install form of the command: the Rust binary, the wheel's console script
and the gem's executable, beside the bare start-up of the two interpreters.
Prints the median wall time of RUNS runs of each, taken in turns so that a
busy moment of the machine hits every form alike.

    python bench/command.py [RUNS]

Run it after scripts/setup (which installs the wheel into .venv and the
gem) and `cargo build --release -p lockyard-cli`; a form that is missing
is skipped with a note. It starts its own redis-server.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench import RedisServer

ROOT = Path(__file__).resolve().parents[1]


def forms() -> dict[str, list[str]]:
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    gem_bindir = subprocess.run(
        ["ruby", "-e", "print Gem.bindir"], capture_output=True, text=True, check=True
    ).stdout
    found = {
        "cargo install (Rust binary)": target / "release/lockyard",
        "wheel (console script)": ROOT / ".venv/bin/lockyard",
        "gem (exe/lockyard)": Path(gem_bindir) / "lockyard",
    }
    for form, path in list(found.items()):
        if not path.is_file():
            print(f"skipped {form}: no {path}", file=sys.stderr)
            del found[form]
    return {form: [str(path)] for form, path in found.items()}


def wall_ms(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1000


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    with tempfile.TemporaryDirectory() as directory:
        server = RedisServer(directory)
        try:
            env = {**os.environ, "LOCKYARD_URL": server.url}
            # What each entry point costs before lockyard runs at all.
            interpreters = {
                "python -c pass (start-up)": [
                    str(ROOT / ".venv/bin/python"),
                    "-c",
                    "pass",
                ],
                "ruby -e nil (start-up)": ["ruby", "-e", "nil"],
            }
            commands = (
                {"true alone": ["true"]}
                | interpreters
                | {
                    form: [*program, "lock", "--quiet", "bench-command", "--", "true"]
                    for form, program in forms().items()
                }
            )
            for command in commands.values():  # warm the page cache
                wall_ms(command, env)
            times: dict[str, list[float]] = {form: [] for form in commands}
            for _ in range(runs):
                for form, command in commands.items():
                    times[form].append(wall_ms(command, env))
        finally:
            server.process.kill()
            server.process.wait()
    floor = statistics.median(times["true alone"])
    print(f"lockyard lock NAME -- true: median of {runs} runs, wall time")
    print(f"{'form':<30} {'median ms':>10} {'over true':>10}")
    for form, samples in times.items():
        median = statistics.median(samples)
        print(f"{form:<30} {median:>10.2f} {median - floor:>10.2f}")


if __name__ == "__main__":
    main()
