"""The decision record is paged by ``ix_interactions_decided`` in the order it streams, never by sorting every
decided wait: EXPLAIN on a seeded database, not a timing (as tests/integration/test_list_plans.py does for
the lists), first page and a page deep into the table, for an admin, an auditor and a target filter."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import event, text

from models import access
from models.decisions import PAGE, Span, decided
from models.tables import Principal
from parkway.db import get_engine, transaction
from tests.integration.helpers import add_principal
from tests.integration.test_list_plans import Plan, explained, problems, seeded_database
from tests.support import ADMIN, AGENT

DECIDED = 40_000  # answered waits of completed runs, on 50 targets
AUDITOR = "plan-auditor"
INDEX = "ix_interactions_decided"


def _seed() -> None:
    series = "FROM generate_series(1, :n) AS g"
    at = "now() - make_interval(secs => g)"
    with transaction() as session:
        owner = session.execute(text("SELECT id FROM principals WHERE name = :a"), {"a": AGENT}).scalar_one()
        params = {"n": DECIDED, "o": owner}
        session.execute(text("INSERT INTO runs (id, workflow, status, owner_id, target, payload, created_at, "
                             f"updated_at, projection_pending) SELECT 'r' || g, 'w', 'completed', :o, "
                             f"'team:t' || (g % 50), '{{}}', {at}, {at}, false {series}"), params)  # fmt: skip
        steps = f"SELECT 's' || g, 'r' || g, 1, 'w', 'completed', {at}, {at} {series}"
        session.execute(text(f"INSERT INTO steps (id, run_id, seq, name, status, created_at, updated_at) {steps}"),
                        params)  # fmt: skip
        session.execute(text("INSERT INTO interactions (id, run_id, step_id, key, kind, target, status, created_at, "
                             f"closed_at) SELECT 'i' || g, 'r' || g, 's' || g, 'go', 'question', 'team:t' || (g % 50), "
                             f"'answered', {at}, {at} {series}"), params)  # fmt: skip
    with get_engine().connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE runs, steps, interactions"))


def _seed_with_auditor() -> None:
    add_principal(AUDITOR, "auditor", grant="team:t7")
    _seed()


@pytest.fixture(scope="module")
def seeded(template_db: str) -> Iterator[dict[str, Principal]]:
    with seeded_database(template_db, _seed_with_auditor) as people:
        yield people


def page_plans(targets: Any, span: Span, pages: int) -> list[Plan]:
    """The plans, custom and generic, of the page statements ``decided`` sends for its first ``pages`` pages."""
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if "ORDER BY interactions.closed_at" in statement:
            sent.append((statement, parameters))

    event.listen(get_engine(), "before_cursor_execute", record)
    try:
        for _ in zip(range(pages * PAGE), decided(targets, span), strict=False):
            pass
    finally:
        event.remove(get_engine(), "before_cursor_execute", record)
    plans = [plan for statement, parameters in sent[-1:] + sent[:1] for plan in explained(statement, parameters)]
    assert plans, "decided() sent no page statement"
    return plans


@pytest.mark.parametrize(
    "case",
    ["admin, everything", "admin, since an hour ago", "admin, one target", "auditor of one target"],
)
def test_plan__the_record_pages_by_its_index_in_order_never_every_decided_wait(
    seeded: dict[str, Principal], case: str
) -> None:
    who = seeded[AUDITOR if case.startswith("auditor") else ADMIN]
    span = Span(
        since=datetime.fromisoformat("2000-01-01T00:00:00+00:00") if "since" in case else None,
        target="team:t7" if "one target" in case else None,
    )
    plans = page_plans(access.decision_targets(who), span, pages=3)
    index = INDEX if case in ("admin, everything", "admin, since an hour ago") else f"{INDEX}_target"
    failing = [(p, found) for p in plans if (found := problems(p, index))]
    assert not failing, "\n\n".join(f"{p.mode} plan: {'; '.join(f)}\n" + "\n".join(p.outline()) for p, f in failing)
