"""What the sweep's test modules share (test_sweep.py, test_sweep_fail_closed.py) besides their database
(``swept_db``, tests/integration/conftest.py): the ways they start, claim and count."""

from __future__ import annotations

from beat.report import SweepReport
from models import store
from models.base import utcnow
from parkway.db import transaction
from tests.acceptance.seeding import shape, started_runs
from tests.integration.helpers import (
    continuation,
)
from tests.support import (
    continuations,
    start,
    wait_for,
)


def start_ids(n: int, workflow: str = "t.after") -> list[str]:
    """Start ``n`` runs and return their ready start continuations."""
    ids = []
    for i in range(n):
        (c,) = continuations(start(workflow, {"i": i}))
        ids.append(c.id)
    return ids


def many_ids(n: int, workflow: str = "t.after") -> list[str]:
    """``_start_ids`` for the tests of many rows whose order does not matter: the first run started, the others
    made as it was by the store's own statement at once (the start is not what these tests are about)."""
    started = start(workflow)
    seeded = started_runs(n - 1, workflow)
    assert shape(seeded[0][0]) == shape(started)
    (first,) = continuations(started)
    return [first.id, *(cid for _, cid in seeded)]


def claim_for(continuation_id: str, lease_s: float, execution_id: str | None = None) -> None:
    with transaction() as session:
        row = store.claim(
            session,
            continuation_id,
            execution_id=execution_id or store.new_id(),
            lease_s=lease_s,
            max_attempts=100,
        )
        assert row is not None


def claim_until_expired(continuation_id: str) -> None:
    """One execution claims and dies: its short lease runs out for real."""
    claim_for(continuation_id, 0.01)
    lease = continuation(continuation_id).lease_expires_at
    assert lease is not None
    wait_for(lambda: utcnow() > lease, timeout=5, what="the lease to expire")


def pass_counts(report: SweepReport) -> dict[str, int]:
    return {k: report.counts[k] for k in ("republished", "lease_expired", "expired", "dead", "errors")}
