"""A minimal Oblivious HTTP relay for the tests (RFC 9458 §6.2): it forwards each POSTed body to
one gateway and the answer back, and nothing else.

It keeps no client address and forwards no client header: the request it makes carries only
Content-Type and Content-Length (http.client adds Host and Accept-Encoding: identity), from its
own source address (``source``, e.g. 127.0.0.2: Linux routes all of 127/8 to loopback, so the
collector sees a different address from the devices'); the answer it returns carries only the
gateway's status, Content-Type and body. It records what it saw, for the tests to check.
"""

from __future__ import annotations

import http.client
import http.server
import threading
import urllib.parse
from typing import Any


class Relay:
    """``with Relay(gateway_url) as relay: relay.url`` — a relay on 127.0.0.1 (ephemeral port)."""

    def __init__(self, gateway_url: str, source: str = "127.0.0.2") -> None:
        target = urllib.parse.urlsplit(gateway_url)
        self.host, self.port, self.path = target.hostname, target.port or 80, target.path or "/"
        self.source = source
        self.seen: list[dict[str, Any]] = []     # per request: client address, header names, sizes
        self.lock = threading.Lock()
        relay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # no access log: no client addresses
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with relay.lock:
                    relay.seen.append({"client": self.client_address[0], "headers": sorted(self.headers.keys()),
                                       "bytes": len(body), "body": body})
                try:
                    status, ctype, data = relay.forward(self.headers.get("Content-Type", ""), body)
                except OSError:
                    status, ctype, data = 502, "text/plain", b"gateway unreachable"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="ohttp-relay", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/relay"

    def forward(self, content_type: str, body: bytes) -> tuple[int, str, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30, source_address=(self.source, 0))
        try:
            conn.request("POST", self.path, body=body, headers={"Content-Type": content_type})
            resp = conn.getresponse()
            return resp.status, resp.getheader("Content-Type", "application/octet-stream"), resp.read()
        finally:
            conn.close()

    def __enter__(self) -> Relay:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
