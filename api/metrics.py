"""Prometheus metrics: answers by outcome, continuations by status (read at scrape), request latency."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from models import access
from models.status import ContinuationStatus
from parkway.db import transaction

log = logging.getLogger("parkway.api")

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

ANSWERS = Counter(
    "parkway_answers",
    "Answers received over HTTP by outcome (answered, rejected, conflict, gone, invalid_answer …)",
    ["outcome"],
    registry=REGISTRY,
)
REQUEST_LATENCY = Histogram(
    "parkway_http_request_duration_seconds",
    "Time to answer an HTTP request, by method, route template and status code",
    ["method", "route", "status"],
    registry=REGISTRY,
)
OPEN_STREAMS = Gauge("parkway_event_streams_open", "Server-sent event streams now open", registry=REGISTRY)
# Streams last as long as the client stays: their duration is not a latency.
UNTIMED_ROUTES = frozenset({"/v1/events/stream"})


class ContinuationsByStatus(Collector):
    """``parkway_continuations{status}``: counted in the database at scrape time, never cached."""

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("parkway_continuations", "Continuations by status", labels=["status"])

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("parkway_continuations", "Continuations by status", labels=["status"])
        try:
            with transaction() as session:
                counts = access.continuation_counts(session)
        except Exception:
            log.warning("could not count continuations for /metrics", exc_info=True)
            return
        for status in ContinuationStatus:
            family.add_metric([status.value], counts.get(status.value, 0))
        yield family


REGISTRY.register(ContinuationsByStatus())


class MetricsMiddleware:
    """Observes every HTTP request's latency under its route template (bounded label values)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def observe_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observe_status)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            if route not in UNTIMED_ROUTES:
                REQUEST_LATENCY.labels(scope["method"], route, str(status["code"])).observe(
                    time.perf_counter() - started
                )
