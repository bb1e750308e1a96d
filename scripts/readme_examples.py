"""Runs every ```python, ```ruby and ```rust block of a Markdown file against
a private redis-server, so the README's examples are tested, not trusted.

Blocks use URLs redis://127.0.0.1:<port>/<db> with ports 6379, 6380 and 6381
(the quorum example needs separate servers); each is pointed at one of three
private servers (same db). etcd://127.0.0.1:2379 is pointed at a private etcd
member. A block whose first line is a comment containing "not run" is
skipped. Usage: python scripts/readme_examples.py README.md
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The private redis-server the Python tests start.
sys.path.append(str(ROOT / "bindings-python" / "tests"))
from etcd_server import Etcd
from redis_server import Redis

README_PORTS = (6379, 6380, 6381)
BLOCK = re.compile(r"^```(python|ruby|rust)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def rust_command(code: str, workdir: Path) -> list[str]:
    """A throwaway crate that depends on core/ by path, as a user's would."""
    project = workdir / "readme-example"
    (project / "src").mkdir(parents=True, exist_ok=True)
    (project / "Cargo.toml").write_text(
        '[package]\nname = "readme-example"\nversion = "0.0.0"\nedition = "2021"\n\n'
        f'[dependencies]\nlockyard = {{ path = "{ROOT / "core"}" }}\n'
        # For the async examples, as a tokio user's crate would have.
        'tokio = { version = "1", features = ["rt", "macros"] }\n\n[workspace]\n'
    )
    shutil.copy(ROOT / "Cargo.lock", project / "Cargo.lock")
    (project / "src" / "main.rs").write_text(code)
    return ["cargo", "run", "--quiet", "--manifest-path", str(project / "Cargo.toml")]


def main(path: str) -> int:
    text = Path(path).read_text()
    blocks = [
        (m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1)
        for m in BLOCK.finditer(text)
    ]
    failures = 0
    ran = 0
    with tempfile.TemporaryDirectory(prefix="lockyard-readme-") as tmp:
        workdir = Path(tmp)
        servers: list[Redis | Etcd] = []
        try:
            (workdir / "etcd").mkdir()
            etcd = Etcd(workdir / "etcd")
            servers.append(etcd)
            for port in README_PORTS:
                (workdir / str(port)).mkdir()
                servers.append(Redis(workdir / str(port)))
            for lang, code, line in blocks:
                if "not run" in code.splitlines()[0]:
                    continue
                code = code.replace("etcd://127.0.0.1:2379", etcd.url)
                for port, server in zip(README_PORTS, servers[1:]):
                    code = code.replace(
                        f"redis://127.0.0.1:{port}/",
                        f"redis://127.0.0.1:{server.port}/",
                    )
                if lang == "python":
                    command = [sys.executable, "-c", code]
                elif lang == "ruby":
                    command = ["ruby", "-e", code]
                else:
                    command = rust_command(code, workdir)
                result = subprocess.run(
                    command,
                    check=False,
                    capture_output=True,
                    text=True,
                    timeout=600,
                    env={**os.environ, "RUST_BACKTRACE": "1"},
                )
                ran += 1
                if result.returncode != 0:
                    failures += 1
                    print(
                        f"{path}:{line}: {lang} example failed ({result.returncode})\n"
                        f"{result.stdout}{result.stderr}"
                    )
                else:
                    print(f"{path}:{line}: {lang} example ok")
        finally:
            for server in servers:
                server.stop()
    print(f"readme: {ran - failures} passed, {failures} failed")
    return 1 if failures or not ran else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "README.md"))
