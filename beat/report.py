"""What one recovery sweep pass did: its counts per category, the line ``parkway sweep --once`` prints, and
the sentence its log says when it did something (an idle pass says nothing at INFO)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# In the sweep's order: 1 republished + lease_expired, 2 expired, 3 dead + unregistered + revoked (waits whose
# continuation version no live worker has advertised for the grace, or whose run's owner lost its grant),
# 4 reviews_interrupted, 5 projections, 6 webhooks (subscriptions behind the event log, published) and
# webhook_log (delivery log lines past PARKWAY_WEBHOOK_LOG_DAYS, deleted), 7 reminded and escalated (a wait's
# team timers, docs/teams.md), 8 sealed (events sealed into the event log's next checkpoint, docs/operations.md);
# errors counts rows skipped.
CATEGORIES = (
    "republished",
    "lease_expired",
    "expired",
    "dead",
    "unregistered",
    "revoked",
    "reviews_interrupted",
    "projections",
    "webhooks",
    "webhook_log",
    "reminded",
    "escalated",
    "sealed",
    "errors",
)


@dataclass
class SweepReport:
    """What one pass did, per category, and how long it took."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    duration_s: float = 0.0
    batch: int = 0
    published: int = 0  # messages this pass sent
    queued: int | None = None  # messages the steps and continuations queues held (None: the broker did not say)

    @property
    def full(self) -> bool:
        """Some category stopped at its bound: more rows may be due right now."""
        return any(self.counts[c] >= self.batch for c in CATEGORIES if c != "errors")

    def line(self) -> str:
        parts = " ".join(f"{k}={v}" for k, v in self.counts.items())
        return f"sweep pass: {parts} queued={self.queued} duration_ms={self.duration_s * 1000:.1f}"

    def sentence(self) -> str | None:
        """What the pass did, as one sentence ("sweep: re-drove 2 continuations, interrupted 1 wait …"), or
        ``None`` when it did nothing."""
        done = [_clause(c, n) for c, n in self.counts.items() if n]
        return f"sweep: {', '.join(done)}" if done else None

    def as_dict(self) -> dict[str, Any]:
        return {**self.counts, "duration_s": round(self.duration_s, 4)}


def _clause(category: str, n: int) -> str:
    one = n == 1
    return CLAUSES[category].format(n=n, s="" if one else "s", ies="y" if one else "ies")


# Each category as the clause of a pass's sentence: "{n}" the count, "{s}" the plural ending.
CLAUSES = {
    "republished": "re-drove {n} continuation{s}",
    "lease_expired": "released {n} expired lease{s}",
    "expired": "expired {n} wait{s}",
    "dead": "gave up {n} continuation{s} out of attempts",
    "unregistered": "interrupted {n} run{s} no live worker serves",
    "revoked": "interrupted {n} run{s} whose owner lost its grant",
    "reviews_interrupted": "interrupted {n} review{s} whose owner is gone",
    "projections": "projected {n} run{s}",
    "webhooks": "sent {n} webhook deliver{ies}",
    "webhook_log": "pruned {n} delivery log line{s}",
    "reminded": "reminded {n} wait{s}",
    "escalated": "escalated {n} wait{s}",
    "sealed": "sealed {n} event{s}",
    "errors": "skipped {n} bad row{s}",
}
