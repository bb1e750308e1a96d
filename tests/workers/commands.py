"""How to start a worker in each language; shared by the tests and the demo.

Python workers run under this interpreter (override: LOCKYARD_TEST_PYTHON).
Ruby workers run under `ruby` with the installed gem, or, when no gem is
installed, with the dev build in bindings-ruby/lib (see
bindings-ruby/build-dev.sh). Override with LOCKYARD_TEST_RUBY, e.g.
"ruby -I /path/to/lib".
"""

import functools
import os
import shlex
import subprocess
import sys
from pathlib import Path

WORKERS = Path(__file__).resolve().parent
RUBY_DEV_LIB = WORKERS.parent.parent / "bindings-ruby" / "lib"


@functools.cache
def ruby() -> list[str]:
    if "LOCKYARD_TEST_RUBY" in os.environ:
        return shlex.split(os.environ["LOCKYARD_TEST_RUBY"])
    gem = subprocess.run(
        ["ruby", "-e", 'require "lockyard"'], check=False, capture_output=True
    )
    if gem.returncode == 0 or not list((RUBY_DEV_LIB / "lockyard").glob("*.so")):
        return ["ruby"]
    return ["ruby", "-I", str(RUBY_DEV_LIB)]


def python() -> list[str]:
    return [os.environ.get("LOCKYARD_TEST_PYTHON", sys.executable)]


def worker_command(lang: str, script: str = "worker") -> list[str]:
    """The command line of tests/workers/<script>.py or .rb before its own
    arguments."""
    if lang == "py":
        return [*python(), str(WORKERS / f"{script}.py")]
    return [*ruby(), str(WORKERS / f"{script}.rb")]
