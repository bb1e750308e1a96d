"""A small, faithful Cloud Storage JSON API server for lock tests.

fake-gcs-server ignores ifGenerationMatch/ifMetagenerationMatch on PATCH
and DELETE and never bumps metageneration, so the races that decide a
lock's safety (takeover of a paused holder, refresh after takeover, delete
of a re-created object) need this one: the five calls the lock makes, with
every precondition honoured, plus fault injection.

    python tests/faithful_gcs.py [--port N] [--bucket NAME ...]

prints ``port <N>`` once listening; point STORAGE_EMULATOR_HOST at it.
Control endpoints (JSON bodies):

- ``POST /_faults {"op": "create|get|update|delete", "fault": F, "times": n}``
  where F is ``"503"``, ``"429"``, ``"reset"`` (connection closed, nothing
  applied), ``"lose_reply"`` (applied, then the connection is closed) or
  ``"slow:<seconds>"``;
- ``POST /_skew {"seconds": s}``: the server's clock (``Date``) runs ahead by s;
- ``GET /_stats``: requests per operation;
- ``DELETE /_object?bucket=b&name=n``: removes an object unconditionally.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit


class State:
    def __init__(self, buckets: list[str]) -> None:
        self.lock = threading.Lock()
        self.buckets = set(buckets)
        self.objects: dict[tuple[str, str], dict[str, object]] = {}
        self.last_generation = int(time.time() * 1_000_000)
        self.faults: list[tuple[str, str]] = []
        self.skew = 0.0
        self.stats = {"create": 0, "get": 0, "update": 0, "delete": 0}

    def take_fault(self, op: str) -> str | None:
        with self.lock:
            self.stats[op] += 1
            for index, (fault_op, fault) in enumerate(self.faults):
                if fault_op == op:
                    del self.faults[index]
                    return fault
        return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: State

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle's
        # algorithm and delayed ACKs add 40 ms to every reply.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:
        pass

    def date_time_string(self, timestamp: float | None = None) -> str:
        return formatdate(time.time() + self.state.skew, usegmt=True)

    def reply(self, status: int, body: object | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, status: int, message: str) -> None:
        self.reply(status, {"error": {"code": status, "message": message}})

    def body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length)

    def hang_up(self) -> None:
        self.close_connection = True
        self.connection.close()

    def route(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        parts = url.path.split("/")
        body = self.body()
        if url.path.startswith("/_"):
            return self.control(method, url.path, query, body)
        if method == "POST" and url.path.startswith("/upload/storage/v1/b/"):
            bucket, name, op = unquote(parts[5]), query.get("name", ""), "create"
        elif url.path.startswith("/storage/v1/b/") and len(parts) >= 7:
            bucket, name = unquote(parts[4]), unquote("/".join(parts[6:]))
            op = {"GET": "get", "PATCH": "update", "DELETE": "delete"}[method]
        else:
            return self.error(400, f"unsupported request {method} {url.path}")
        fault = self.state.take_fault(op)
        if fault in ("503", "429"):
            return self.error(int(fault), "injected")
        if fault == "reset":
            return self.hang_up()
        if fault and fault.startswith("slow:"):
            time.sleep(float(fault[5:]))
        if bucket not in self.state.buckets:
            return self.error(404, f"The specified bucket {bucket} does not exist.")
        status, result = self.apply(op, (bucket, name), query, body)
        if fault == "lose_reply":
            return self.hang_up()
        if status >= 400:
            return self.error(status, str(result))
        return self.reply(status, result)

    def apply(
        self, op: str, key: tuple[str, str], query: dict[str, str], body: bytes
    ) -> tuple[int, object]:
        state = self.state
        with state.lock:
            current = state.objects.get(key)
            if op == "get":
                return (200, current) if current else (404, "No such object")
            if op == "create":
                if query.get("ifGenerationMatch") == "0" and current:
                    return 412, "Precondition Failed"
                resource = json.loads(
                    body.split(b"\r\n\r\n", 1)[1].split(b"\r\n--", 1)[0]
                )
                state.last_generation += 1
                state.objects[key] = {
                    "bucket": key[0],
                    "name": key[1],
                    "generation": str(state.last_generation),
                    "metageneration": "1",
                    "cacheControl": resource.get("cacheControl"),
                    "metadata": resource.get("metadata", {}),
                }
                return 200, state.objects[key]
            if current is None:
                return 404, "No such object"
            for param, field in (
                ("ifGenerationMatch", "generation"),
                ("ifMetagenerationMatch", "metageneration"),
            ):
                if param in query and query[param] != current[field]:
                    return 412, "Precondition Failed"
            if op == "delete":
                del state.objects[key]
                return 204, None
            patch = json.loads(body)
            metadata = dict(current["metadata"])  # type: ignore[call-overload]
            metadata.update(patch.get("metadata", {}))
            current["metadata"] = metadata
            current["metageneration"] = str(int(str(current["metageneration"])) + 1)
            return 200, current

    def control(
        self, method: str, path: str, query: dict[str, str], body: bytes
    ) -> None:
        state = self.state
        with state.lock:
            if path == "/_faults":
                spec = json.loads(body)
                state.faults += [(spec["op"], spec["fault"])] * int(
                    spec.get("times", 1)
                )
            elif path == "/_skew":
                state.skew = float(json.loads(body)["seconds"])
            elif path == "/_object" and method == "DELETE":
                state.objects.pop((query["bucket"], query["name"]), None)
            elif path != "/_stats":
                return self.error(404, path)
            stats = dict(state.stats)
        self.reply(200, stats)

    def do_GET(self) -> None:
        self.route("GET")

    def do_POST(self) -> None:
        self.route("POST")

    def do_PATCH(self) -> None:
        self.route("PATCH")

    def do_DELETE(self) -> None:
        self.route("DELETE")


def serve(port: int = 0, buckets: list[str] | None = None) -> ThreadingHTTPServer:
    """Starts the server on a daemon thread; ``server.server_port`` is its port."""
    handler = type("BoundHandler", (Handler,), {"state": State(buckets or ["locks"])})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--bucket", action="append", default=None)
    args = parser.parse_args()
    server = serve(args.port, args.bucket)
    print(f"port {server.server_port}", flush=True)
    try:
        sys.stdin.read()  # until the parent closes our stdin or kills us
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
