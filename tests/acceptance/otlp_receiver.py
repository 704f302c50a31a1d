"""A real OTLP/HTTP trace receiver for the tests: ``POST /v1/traces`` (protobuf), decoded with the
``opentelemetry-proto`` package; every byte received is kept, for a search for what must never be exported."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class Span:
    name: str
    service: str
    trace_id: str
    span_id: str
    parent: str
    kind: int  # the OTLP enum: 1 internal, 2 server, 3 client, 4 producer, 5 consumer
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    links: list[tuple[str, str]]  # (trace id, span id)


def _value(value: AnyValue) -> Any:
    return getattr(value, value.WhichOneof("value") or "string_value")


@dataclass
class Receiver:
    raw: list[bytes] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.take(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        self.raw.append(body)
        for resource in request.resource_spans:
            attrs = {a.key: _value(a.value) for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                for s in scope.spans:
                    self.spans.append(Span(
                        name=s.name, service=attrs.get("service.name", ""), trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(), parent=s.parent_span_id.hex(), kind=s.kind,
                        start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano,
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                    ))  # fmt: skip

    def named(self, name: str, **attributes: Any) -> list[Span]:
        return [s for s in list(self.spans) if s.name == name
                and all(s.attributes.get(k) == v for k, v in attributes.items())]  # fmt: skip

    def env(self) -> dict[str, str]:
        """What a process needs to trace to this receiver, its batches sent within a fifth of a second."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}  # fmt: skip
