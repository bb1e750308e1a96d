"""What both demo scenes share: how to start a worker script of
tests/workers in either language, and how to read its JSON-line log."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKERS = ROOT / "tests" / "workers"
RUBY_DEV_LIB = ROOT / "bindings-ruby" / "lib"
LANGUAGES = {"py": "Python", "rb": "Ruby"}


def worker_command(lang: str, script: str) -> list[str]:
    """Runs tests/workers/<script>.py or .rb with this checkout's bindings."""
    if lang == "py":
        return [sys.executable, str(WORKERS / f"{script}.py")]
    dev_build = list((RUBY_DEV_LIB / "lockyard").glob("*.so"))
    include = ["-I", str(RUBY_DEV_LIB)] if dev_build else []
    return ["ruby", *include, str(WORKERS / f"{script}.rb")]


def records(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]
