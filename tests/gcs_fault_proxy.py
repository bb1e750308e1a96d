"""A fault-injecting HTTP proxy between a GCS lock and its server, and an
OAuth token endpoint, for the fault tests.

Every request is passed on to the upstream server (tests/faithful_gcs.py,
fake-gcs-server) unless a fault is queued for its operation, so a fault looks
to the client exactly as the network or Google would make it look:

    python tests/gcs_fault_proxy.py --upstream 127.0.0.1:N

prints ``port <N>`` once listening. ``POST /token`` answers as an OAuth token
endpoint (``token_uri`` of ``authorized_user`` credentials) with a token
for an hour. Control endpoints
(JSON bodies):

- ``POST /_proxy/faults {"op": OP, "fault": F, "times": n}`` where OP is
  ``create``, ``get``, ``update``, ``delete`` or ``token`` and F is ``"503"``
  or ``"429"`` (answered here, never passed on), ``"reset"`` (connection
  closed before passing it on), ``"lose_reply"`` (passed on and applied
  upstream, then the reply is dropped and the connection closed),
  ``"slow:<seconds>"`` (held that long, then passed on) or
  ``"late_reply:<seconds>"`` (passed on and applied upstream at once, the
  reply held that long: a client timing out meanwhile never learns that
  its write landed);
- ``GET /_proxy/stats``: requests per operation seen here, and under
  ``"bearers"`` every distinct ``Authorization`` header that came with a
  storage request.

It also plays the other endpoints credentials talk to, each answering with
a token that names how it was obtained, so a test can tell from the bearer
that reached storage which way it came:

- ``POST /sts/v1/token``: Google's STS (``token_url`` of an
  ``external_account``): ``sts:<subject_token>``;
- ``POST /iam/...:generateAccessToken``: IAM credentials
  (``service_account_impersonation_url``): ``impersonated:<bearer it got>``;
- ``GET /subject``: a URL-sourced subject token, ``{"value": "url-subject"}``
  (only with the header ``X-Subject: yes``);
- ``GET /computeMetadata/v1/instance/service-accounts/default/token``: the
  metadata server (``GCE_METADATA_HOST``), ``metadata`` (only with
  ``Metadata-Flavor: Google``).

``POST /sts/v1/token`` answers 400 ``invalid_grant`` for the subject token
``refused``, as STS does for a token it does not trust.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import sys
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

OPS = ("create", "get", "update", "delete", "token")


class Faults:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queued: list[tuple[str, str]] = []
        self.stats = dict.fromkeys(OPS, 0)
        self.bearers: list[str] = []

    def saw_bearer(self, header: str | None) -> None:
        with self.lock:
            if header and header not in self.bearers:
                self.bearers.append(header)

    def take(self, op: str) -> str | None:
        with self.lock:
            if op in self.stats:
                self.stats[op] += 1
            for index, (fault_op, fault) in enumerate(self.queued):
                if fault_op == op:
                    del self.queued[index]
                    return fault
        return None


def operation(method: str, path: str) -> str | None:
    """Which call of the lock a request is, as faithful_gcs.py sorts them."""
    if path == "/token":
        return "token"
    if method == "POST" and path.startswith("/upload/storage/v1/b/"):
        return "create"
    if path.startswith("/storage/v1/b/") and "/o/" in path:
        return {"GET": "get", "PATCH": "update", "DELETE": "delete"}.get(method)
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: str
    faults: Faults
    upstream_date: str | None = None

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:
        pass

    def date_time_string(self, timestamp: float | None = None) -> str:
        # The upstream server's clock, which the lock reads from `Date`.
        return self.upstream_date or formatdate(time.time(), usegmt=True)

    def reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def reply_json(self, status: int, body: object) -> None:
        self.reply(status, json.dumps(body).encode(), "application/json")

    def hang_up(self) -> None:
        self.close_connection = True
        self.connection.close()

    def handle_any(self) -> None:
        method = self.command
        path = urlsplit(self.path).path
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if path.startswith("/_proxy/"):
            return self.control(method, path, body)
        if self.credential_endpoint(method, path, body):
            return None
        op = operation(method, path)
        if op and op != "token":
            self.faults.saw_bearer(self.headers.get("Authorization"))
        fault = self.faults.take(op) if op else None
        if fault in ("503", "429"):
            status = int(fault)
            message = {"error": {"code": status, "message": "injected by the proxy"}}
            return self.reply_json(status, message)
        if fault == "reset":
            return self.hang_up()
        if fault and fault.startswith("slow:"):
            time.sleep(float(fault[5:]))
        if op == "token":
            token = {"access_token": "proxy", "expires_in": 3600, "token_type": "Bearer"}
            return self.reply_json(200, token)
        status, headers, answer = self.pass_on(method, body)
        if fault == "lose_reply":
            return self.hang_up()
        if fault and fault.startswith("late_reply:"):
            time.sleep(float(fault[11:]))
        self.upstream_date = headers.get("Date")
        self.reply(status, answer, headers.get("Content-Type", "application/json"))

    def credential_endpoint(self, method: str, path: str, body: bytes) -> bool:
        """Answers as STS, IAM credentials, a subject token URL or the
        metadata server; False for any other request."""
        hour = {"expires_in": 3600, "token_type": "Bearer"}
        if method == "POST" and path == "/sts/v1/token":
            form = parse_qs(body.decode())
            subject = form.get("subject_token", [""])[0]
            if subject == "refused":
                self.reply_json(400, {"error": "invalid_grant"})
            else:
                token = {
                    "access_token": f"sts:{subject}",
                    "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                    **hour,
                }
                self.reply_json(200, token)
        elif method == "POST" and path.endswith(":generateAccessToken"):
            bearer = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            expires = time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600)
            )
            self.reply_json(
                200, {"accessToken": f"impersonated:{bearer}", "expireTime": expires}
            )
        elif method == "GET" and path == "/subject":
            if self.headers.get("X-Subject") != "yes":
                self.reply_json(403, {"error": "missing header"})
            else:
                self.reply_json(200, {"value": "url-subject"})
        elif path.startswith("/computeMetadata/"):
            if self.headers.get("Metadata-Flavor") != "Google":
                self.reply_json(403, {"error": "missing Metadata-Flavor"})
            elif path.endswith("/service-accounts/default/token"):
                self.reply_json(200, {"access_token": "metadata", **hour})
            elif path.endswith("/universe/universe-domain"):
                self.reply(200, b"googleapis.com", "text/plain")
            else:
                self.reply_json(404, {"error": path})
        else:
            return False
        return True

    def pass_on(self, method: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection(self.upstream, timeout=30)
        try:
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() not in ("host", "connection", "content-length")
            }
            connection.request(method, self.path, body or None, headers)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def control(self, method: str, path: str, body: bytes) -> None:
        faults = self.faults
        with faults.lock:
            if path == "/_proxy/faults" and method == "POST":
                spec = json.loads(body)
                if spec["op"] not in OPS:
                    return self.reply_json(400, {"error": f"unknown op {spec['op']}"})
                faults.queued += [(spec["op"], spec["fault"])] * int(
                    spec.get("times", 1)
                )
            elif path != "/_proxy/stats":
                return self.reply_json(404, {"error": path})
            stats: dict[str, object] = dict(faults.stats)
            stats["bearers"] = list(faults.bearers)
        self.reply_json(200, stats)

    do_GET = do_POST = do_PATCH = do_DELETE = handle_any


def serve(upstream: str, port: int = 0) -> ThreadingHTTPServer:
    """Starts the proxy on a daemon thread; ``server.server_port`` is its port."""
    handler = type(
        "BoundHandler", (Handler,), {"upstream": upstream, "faults": Faults()}
    )
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", required=True, help="host:port of the GCS server")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = serve(args.upstream, args.port)
    print(f"port {server.server_port}", flush=True)
    try:
        sys.stdin.read()  # until the parent closes our stdin or kills us
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
