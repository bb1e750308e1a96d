"""What both demo scenes share: how to start a worker script of
tests/workers in either language, and how to read its JSON-line log."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "workers"))

# One place decides how workers start, for the tests and the demo alike.
from commands import worker_command

__all__ = ["LANGUAGES", "records", "worker_command"]

LANGUAGES = {"py": "Python", "rb": "Ruby"}


def records(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]
