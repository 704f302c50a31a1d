"""``python -m bench.receiver PORT``: the webhooks case's receiver, a threaded HTTP server on 127.0.0.1 that
reads each request and answers 200 at once (no verification: the acceptance tests verify; this measures the
sender). A process of its own, so it takes no GIL from the bench's producers. As the tracing what-if's OTLP
sink it also counts the spans posted to ``/v1/traces`` (``GET /spans``: how many so far), so a measure can
wait until the workers have exported all of theirs; ``GET /spans/names``: how many of each name, and their
attributes and links in all (JSON), what the what-if reports per completion."""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_spans = [0]
_names: Counter[str] = Counter()  # spans by name, and "attributes" and "links": their numbers in all
_lock = threading.Lock()


def spans_in(body: bytes) -> int:
    """How many spans the export holds (and their names, attributes and links tallied)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest.FromString(body)
    spans = [span for resource in request.resource_spans for scope in resource.scope_spans for span in scope.spans]
    with _lock:
        _names.update(span.name for span in spans)
        _names.update(attributes=sum(len(span.attributes) for span in spans), links=sum(len(s.links) for s in spans))
    return len(spans)


class Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path == "/v1/traces":
            spans = spans_in(body)
            with _lock:
                _spans[0] += spans
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        with _lock:
            text = (json.dumps(dict(_names)) if self.path == "/spans/names" else str(_spans[0])).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, *args: object) -> None:
        pass


def main(port: int) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", port), Answer)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]))
