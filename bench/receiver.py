"""``python -m bench.receiver PORT``: the webhooks case's receiver, a threaded HTTP server on 127.0.0.1 that
reads each request and answers 200 at once (no verification: the acceptance tests verify; this measures the
sender). A process of its own, so it takes no GIL from the bench's producers."""

from __future__ import annotations

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def main(port: int) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", port), Answer)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]))
