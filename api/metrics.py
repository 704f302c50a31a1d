"""Prometheus metrics, read at scrape time: answers, requests, the database's work and the broker's queues.

Nothing is cached between scrapes. The reads follow what is in flight, not the size of the tables: the
oldest ``ready`` continuation (two reads of the partial index ``ix_continuations_ready``), the runs whose
projections are pending (the partial index ``ix_runs_projection_pending``), the waits on versions no live
worker runs (one probe of ``ix_interactions_pending_continuation`` per distinct parked version, then the
waits on unserved ones: ``models.fleet``), the sweep totals (one row per category), and per named queue its
length (Redis ``LLEN`` of kombu's priority lists, or the filesystem broker's message files) and, on Redis,
its unacknowledged deliveries (kombu's ``unacked`` hash). The one exception is
``parkway_continuations{status}``, a ``GROUP BY`` over the whole continuations table. docs/operations.md
says what each metric means and what to do when it grows."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.routing import Match, Route
from starlette.types import Scope

from api import webhook_metrics
from models import fleet, gauges, store
from models.base import utcnow
from models.status import ContinuationStatus
from models.store.sweep import PASSES
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
UNTIMED_ROUTES = frozenset({"/v1/events/stream", "/decisions/stream"})

# Per-queue unacked counts read the hash's entries; past this many only the total (HLEN) is exported.
UNACKED_SCAN = 1000
BROKER_TIMEOUT_S = 2.0


# --------------------------------------------------------------------------- the database


def _families() -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
    return {
        "continuations": GaugeMetricFamily("parkway_continuations", "Continuations by status", labels=["status"]),
        "oldest_ready": GaugeMetricFamily(
            "parkway_continuation_oldest_ready_age_seconds",
            "Seconds since the oldest ready (due, not yet consumed) continuation was created; 0 when none",
        ),
        "publish_age": GaugeMetricFamily(
            "parkway_continuation_ready_publish_age_seconds",
            "Seconds since the least recently (re)published ready continuation was sent to the broker; 0 when "
            "none. The sweep keeps it near PARKWAY_REENQUEUE_AFTER_S while it runs",
        ),
        "projection_pending": GaugeMetricFamily(
            "parkway_runs_projection_pending",
            "Terminal runs whose projections (run_metadata.json, schedule history) do not agree yet",
        ),
        "unserved": GaugeMetricFamily(
            "parkway_waits_unserved",
            "Parked steps waiting on a continuation version no live worker advertises now; past "
            "PARKWAY_VERSION_GRACE_S they fail closed (interrupted) at the next sweep, unless no worker is alive",
        ),
        "unserved_by_version": GaugeMetricFamily(
            "parkway_waits_unserved_by_version",
            "parkway_waits_unserved by the continuation version (name@version) they wait on",
            labels=["version"],
        ),
        "leases_outstanding": GaugeMetricFamily(
            "parkway_remote_leases_outstanding", "Continuations remote workers hold under a live lease now"
        ),
        "leases_expired": GaugeMetricFamily(
            "parkway_remote_leases_expired",
            "Remote leases that ran out and were not taken up again yet (the next lease call or sweep re-drives them)",
        ),
        "push_attempts": CounterMetricFamily("parkway_push_attempts", "POSTs to each push handler", labels=["handler"]),
        "push_failures": CounterMetricFamily(
            "parkway_push_failures",
            "POSTs to each push handler that brought no committable outcome (a timeout, a 5xx, a lost connection: "
            "retried; a malformed answer: the run failed; a 410: interrupted)",
            labels=["handler"],
        ),
        "sweep_rows": CounterMetricFamily(
            "parkway_sweep_rows", "Rows the recovery sweep acted on since the database was made", labels=["category"]
        ),
        "sweep_passes": CounterMetricFamily(
            "parkway_sweep_passes", "Recovery sweep passes since the database was made, idle ones too"
        ),
        "sweep_last_rows": GaugeMetricFamily(
            "parkway_sweep_last_rows", "Rows the last recovery sweep pass acted on", labels=["category"]
        ),
        "sweep_duration": GaugeMetricFamily(
            "parkway_sweep_last_duration_seconds", "How long the last recovery sweep pass took"
        ),
        "sweep_at": GaugeMetricFamily(
            "parkway_sweep_last_timestamp_seconds", "When the last recovery sweep pass ended (Unix time)"
        ),
        **webhook_metrics.families(),
    }


class DatabaseMetrics(Collector):
    """Continuations by status, the oldest ready one, pending projections, unserved waits, the sweep
    totals and the webhooks (api/webhook_metrics.py), read in one short transaction."""

    def describe(self) -> Iterator[Metric]:
        yield from _families().values()

    def collect(self) -> Iterator[Metric]:
        families = _families()
        try:
            with transaction() as session:
                counts = gauges.continuation_counts(session)
                oldest_created, oldest_enqueued = gauges.oldest_ready(session)
                projection_pending = gauges.projection_pending_count(session)
                unserved = fleet.unserved_counts(session)
                leases = store.outstanding_leases(session)
                pushes = store.push_counts(session)
                totals = gauges.sweep_totals(session)
                hooks = webhook_metrics.read(session)
        except Exception:
            log.warning("could not read the database for /metrics", exc_info=True)
            return
        now = utcnow()
        for status in ContinuationStatus:
            families["continuations"].add_metric([status.value], counts.get(status.value, 0))
        families["oldest_ready"].add_metric([], _age(now, oldest_created))
        families["publish_age"].add_metric([], _age(now, oldest_enqueued))
        families["projection_pending"].add_metric([], projection_pending)
        families["unserved"].add_metric([], sum(unserved.values()))
        families["leases_outstanding"].add_metric([], leases[0])
        families["leases_expired"].add_metric([], leases[1])
        for handler_id, attempts, failures in pushes:
            families["push_attempts"].add_metric([handler_id], attempts)
            families["push_failures"].add_metric([handler_id], failures)
        for version, waits in unserved.items():
            families["unserved_by_version"].add_metric([version], waits)
        for row in totals:
            if row.category == PASSES:
                families["sweep_passes"].add_metric([], row.total)
                continue
            families["sweep_rows"].add_metric([row.category], row.total)
            families["sweep_last_rows"].add_metric([row.category], row.last_count)
        passes = [(row.last_at, row.last_duration_s) for row in totals if row.last_at is not None]
        if passes:
            last_at, duration_s = max(passes)
            families["sweep_duration"].add_metric([], duration_s)
            families["sweep_at"].add_metric([], last_at.timestamp())
        webhook_metrics.fill(families, hooks, now)
        yield from families.values()


def _age(now: Any, then: Any) -> float:
    return max(0.0, (now - then).total_seconds()) if then is not None else 0.0


# --------------------------------------------------------------------------- the broker


@dataclass
class QueueDepths:
    """What the broker holds now: waiting messages per queue, and (Redis) deliveries not yet acked."""

    length: dict[str, int]
    unacked: dict[str, int] | None = None  # per queue; None when not readable (filesystem) or too many
    unacked_total: int | None = None


_redis_clients: dict[str, Any] = {}
_redis_lock = threading.Lock()


def _redis(url: str) -> Any:
    """One client (and connection pool) per broker URL for the life of the process."""
    import redis

    with _redis_lock:
        client = _redis_clients.get(url)
        if client is None:
            client = redis.Redis.from_url(url, socket_timeout=BROKER_TIMEOUT_S, socket_connect_timeout=BROKER_TIMEOUT_S)
            _redis_clients[url] = client
        return client


def redis_depths(url: str, queues: tuple[str, ...], options: dict[str, Any]) -> QueueDepths:
    """``LLEN`` of each queue's lists (kombu keeps one per priority step) and the ``unacked`` hash."""
    from kombu.transport.redis import PRIORITY_STEPS, Channel

    prefix = str(options.get("global_keyprefix", ""))
    sep = str(options.get("sep", Channel.sep))
    steps = list(options.get("priority_steps", PRIORITY_STEPS))
    unacked_key = prefix + str(options.get("unacked_key", Channel.unacked_key))
    client = _redis(url)
    with client.pipeline(transaction=False) as pipe:
        for queue in queues:
            for step in steps:
                pipe.llen(prefix + (f"{queue}{sep}{step}" if step else queue))
        pipe.hlen(unacked_key)
        replies = pipe.execute()
    unacked_total = int(replies[-1])
    length = {
        queue: sum(int(n) for n in replies[i * len(steps) : (i + 1) * len(steps)]) for i, queue in enumerate(queues)
    }
    depths = QueueDepths(length=length, unacked_total=unacked_total)
    if unacked_total <= UNACKED_SCAN:
        depths.unacked = _unacked_by_queue(client, unacked_key, queues)
    return depths


def _unacked_by_queue(client: Any, key: str, queues: tuple[str, ...]) -> dict[str, int]:
    """Each entry of kombu's ``unacked`` hash is ``[message, exchange, routing_key]``; ours route by name."""
    counts = dict.fromkeys(queues, 0)
    for _tag, raw in client.hscan_iter(key, count=200):
        try:
            _message, exchange, routing_key = json.loads(raw)
        except (ValueError, TypeError):
            continue
        queue = routing_key if routing_key in counts else exchange
        if queue in counts:
            counts[queue] += 1
    return counts


def filesystem_depths(folder: Path, queues: tuple[str, ...]) -> QueueDepths:
    """kombu's filesystem transport names each message ``<ms>_<uuid>.<queue>.msg`` in the in-folder."""
    length = dict.fromkeys(queues, 0)
    suffixes = {f"{queue}.msg": queue for queue in queues}
    with os.scandir(folder) as entries:
        for entry in entries:
            queue = suffixes.get(entry.name.partition(".")[2])
            if queue is not None:
                length[queue] += 1
    return QueueDepths(length=length)


SOCKET_SCHEME = "redis+socket://"


def queue_depths() -> QueueDepths | None:
    """The depths of Parkway's named queues on the configured broker; ``None`` for a transport not read."""
    from tasks.celery_app import CONTINUATIONS_QUEUE, PUSH_QUEUE, STEPS_QUEUE, SWEEP_QUEUE, WEBHOOKS_QUEUE
    from tasks.celery_app import app as celery_app

    queues = (STEPS_QUEUE, CONTINUATIONS_QUEUE, SWEEP_QUEUE, WEBHOOKS_QUEUE, PUSH_QUEUE)
    url = str(celery_app.conf.broker_url or "")
    options = dict(celery_app.conf.broker_transport_options or {})
    if url.startswith(("redis://", "rediss://")):
        return redis_depths(url, queues, options)
    if url.startswith(SOCKET_SCHEME):  # the embedded Valkey (parkway.valkey): redis-py spells it unix://
        return redis_depths("unix://" + url.removeprefix(SOCKET_SCHEME), queues, options)
    if url.startswith("filesystem://"):
        return filesystem_depths(Path(options["data_folder_in"]), queues)
    return None  # e.g. RabbitMQ: its own Prometheus plugin exports queue depth and unacked counts


class BrokerMetrics(Collector):
    """``parkway_queue_length{queue}``, ``parkway_queue_unacked{queue}`` and whether the broker answered."""

    def _families(self) -> dict[str, GaugeMetricFamily]:
        return {
            "up": GaugeMetricFamily("parkway_broker_up", "1 when the broker's queues could be read at this scrape"),
            "length": GaugeMetricFamily(
                "parkway_queue_length", "Messages waiting in a broker queue, not yet delivered", labels=["queue"]
            ),
            "unacked": GaugeMetricFamily(
                "parkway_queue_unacked",
                "Messages of a queue delivered to a worker and not yet acknowledged (Redis broker)",
                labels=["queue"],
            ),
            "unacked_total": GaugeMetricFamily(
                "parkway_broker_unacked", "Messages delivered and not yet acknowledged, all queues (Redis broker)"
            ),
        }

    def describe(self) -> Iterator[Metric]:
        yield from self._families().values()

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        try:
            depths = queue_depths()
        except Exception as exc:
            log.warning("could not read the broker's queues for /metrics: %s: %s", type(exc).__name__, exc)
            families["up"].add_metric([], 0)
            yield families["up"]
            return
        if depths is None:
            return
        families["up"].add_metric([], 1)
        for queue, count in depths.length.items():
            families["length"].add_metric([queue], count)
        for queue, count in (depths.unacked or {}).items():
            families["unacked"].add_metric([queue], count)
        if depths.unacked_total is not None:
            families["unacked_total"].add_metric([], depths.unacked_total)
        yield from families.values()


REGISTRY.register(DatabaseMetrics())
REGISTRY.register(BrokerMetrics())


# --------------------------------------------------------------------------- requests


def observe(scope: Scope, status: int, started: float) -> None:
    """An HTTP request's latency since ``started`` (``time.perf_counter``), under its route template (bounded
    label values), unless its route is one of ``UNTIMED_ROUTES``."""
    route = getattr(scope.get("route"), "path", None) or _plain_route(scope) or "unmatched"
    if route not in UNTIMED_ROUTES:
        _latency(scope["method"], route, status).observe(time.perf_counter() - started)


_latencies: dict[tuple[str, str, int], Any] = {}


def _latency(method: str, route: str, status: int) -> Any:
    """``REQUEST_LATENCY``'s child for these labels, looked up once per label set (their values are bounded:
    route templates, not paths)."""
    child = _latencies.get((method, route, status))
    if child is None:
        child = _latencies.setdefault((method, route, status), REQUEST_LATENCY.labels(method, route, str(status)))
    return child


def _plain_route(scope: Scope) -> str | None:
    """The path of the plain Starlette route that served a request (FastAPI's own ``/openapi.json``,
    ``/docs``, ``/redoc``): FastAPI's router names only its ``APIRoute`` in ``scope["route"]``."""
    app = scope.get("app")
    for route in getattr(app, "routes", ()):
        if isinstance(route, Route) and route.matches(scope)[0] is Match.FULL:
            return route.path
    return None
