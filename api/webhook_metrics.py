"""Webhook metrics for ``GET /metrics``: subscriptions by state, and how far each active one lags behind
the event log, read at scrape time in the transaction of ``api.metrics.DatabaseMetrics``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from sqlalchemy.orm import Session

from models import webhooks
from models.status import WebhookStatus


def families() -> dict[str, GaugeMetricFamily]:
    return {
        "webhook_states": GaugeMetricFamily("parkway_webhooks", "Webhook subscriptions by state", labels=["status"]),
        "webhook_lag": GaugeMetricFamily(
            "parkway_webhook_lag_seconds",
            "Per active subscription: seconds since the oldest final event it has not passed yet; 0 when caught up",
            labels=["webhook_id"],
        ),
        "webhook_failing": GaugeMetricFamily(
            "parkway_webhook_failing",
            "1 for each subscription that gave up after its last retry",
            labels=["webhook_id"],
        ),
    }


@dataclass(frozen=True)
class Webhooks:
    states: dict[str, list[str]]
    lags: dict[str, datetime | None]


def read(session: Session) -> Webhooks:
    """What the families show, read in the caller's transaction (the scrape's one)."""
    return Webhooks(webhooks.states(session), webhooks.oldest_pending(session))


def fill(families: dict[str, Any], found: Webhooks, now: datetime) -> None:
    for status in WebhookStatus:
        families["webhook_states"].add_metric([status.value], len(found.states.get(status.value, [])))
    for webhook_id in found.states.get(WebhookStatus.FAILING.value, []):
        families["webhook_failing"].add_metric([webhook_id], 1)
    for webhook_id, oldest in found.lags.items():
        lag = 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())
        families["webhook_lag"].add_metric([webhook_id], lag)
