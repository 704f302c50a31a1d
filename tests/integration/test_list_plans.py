"""Every list and page query is served by an index in the order it returns, on tables big enough for the
planner to care: EXPLAIN on a seeded database, not a timing (issue 31 §4).

Each case calls the read as the API or a page does, captures the statements it sends (with their bound
parameters, as psycopg sends them) and asks PostgreSQL for their plans, custom and generic (psycopg prepares a
statement after a few executions; a prepared one may be planned once for any parameters). A plan passes when:

- it reads neither ``interactions`` nor ``runs`` by a sequential scan;
- every sort in it sorts rows a ``LIMIT`` below it already bounded (a per-target page, merged), or one run's
  rows (an index condition on a run's id): never a sort of every row a filter lets through, which is what a
  page of the newest or oldest rows costs when no index yields its order;
- it names the index meant to serve it: with the index it means gone, a plan may still pass the two rules
  above by walking another index and filtering (each target's page found by reading every pending wait in
  order), which is bounded by nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import event, select, text
from sqlalchemy.orm import Session

from models import access, history
from models.tables import Principal
from parkway.db import get_engine, reset_engine, transaction
from tests.conftest import clone_database, drop_database, use_database
from tests.integration.helpers import make_actors
from tests.support import ADMIN, AGENT, HUMAN

WAITS = 30_000  # pending interactions, one per waiting run
DONE = 30_000  # answered interactions of completed runs, older
TARGETS = 50  # the human and the agent hold a grant on each
NAMED = 40  # waits that name the human, and waits escalated to a target it is granted on
PAGE = 50
TABLES = ("interactions", "runs")


def _seed() -> None:
    """``WAITS`` waiting runs and ``DONE`` completed ones (older), one step and one interaction each, spread
    over ``TARGETS`` targets; every run is the agent's."""
    series = "FROM generate_series(1, :n) AS g"
    target = "'team:t' || (g % :t)"
    with transaction() as session:
        ids = {row.name: row.id for row in session.execute(text("SELECT name, id FROM principals"))}
        for name in (HUMAN, AGENT):
            session.execute(
                text(f"INSERT INTO grants (id, principal_id, target, created_at) SELECT :p || g, :pid, {target}, now() "
                     "FROM generate_series(0, :t - 1) AS g"),
                {"p": f"g-{name}-", "pid": ids[name], "t": TARGETS},
            )  # fmt: skip
        for prefix, n, run_status, step_status, status, age in (
            ("w", WAITS, "waiting", "parked", "pending", "g"),
            ("d", DONE, "completed", "completed", "answered", f"{WAITS} + g"),
        ):
            at = f"now() - make_interval(secs => {age})"
            params = {"n": n, "t": TARGETS, "o": ids[AGENT]}
            session.execute(
                text("INSERT INTO runs (id, workflow, status, owner_id, target, payload, created_at, updated_at, "
                     f"projection_pending) SELECT '{prefix}r' || g, 'w' || (g % 3), '{run_status}', :o, {target}, "
                     f"'{{}}', {at}, {at}, false {series}"),
                params,
            )  # fmt: skip
            session.execute(
                text("INSERT INTO steps (id, run_id, seq, name, status, continuation, created_at, updated_at) "
                     f"SELECT '{prefix}s' || g, '{prefix}r' || g, 1, 'w', '{step_status}', 'k@1', {at}, {at} "
                     + series),
                params,
            )  # fmt: skip
            session.execute(
                text("INSERT INTO interactions (id, run_id, step_id, key, kind, target, status, continuation, "
                     f"created_at) SELECT '{prefix}i' || g, '{prefix}r' || g, '{prefix}s' || g, 'go', 'question', "
                     f"{target}, '{status}', 'k@1', {at} {series}"),
                params,
            )  # fmt: skip
        # Waits that name people (docs/teams.md): most name someone else, a few the human; escalations to
        # targets none of the callers hold, and a few to one the human holds.
        session.execute(
            text("INSERT INTO principals (id, kind, name, created_at) VALUES ('p-other', 'human', 'other', now())")
        )
        answerers = ("INSERT INTO interaction_answerers (interaction_id, source, level, principal_id, target, at) "
                     "SELECT 'wi' || g, {source}, {level}, {principal}, {target}, now() {series}")  # fmt: skip
        for source, level, principal, target_, n in (
            ("'assignee'", "0", "'p-other'", "NULL", WAITS),
            ("'delegate'", "0", ":h", "NULL", NAMED),
            ("'escalation'", "1", "NULL", "'team:e' || (g % 500)", WAITS),
            ("'escalation'", "0", "NULL", "'team:t' || (g % :t)", NAMED),
        ):
            sql = answerers.format(source=source, level=level, principal=principal, target=target_, series=series)
            session.execute(text(sql), {"n": n, "t": TARGETS, "h": ids[HUMAN]})
    with get_engine().connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE runs, steps, interactions, grants, interaction_answerers"))


@contextmanager
def seeded_database(template_db: str, seed: Callable[[], None]) -> Iterator[dict[str, Principal]]:
    """A database of the caller's own with the actors and what ``seed`` adds; the principals by name."""
    url = clone_database(template_db)
    use_database(url)
    try:
        make_actors()
        seed()
        with transaction() as session:
            people = {p.name: p for p in session.scalars(select(Principal))}
            session.expunge_all()
        yield people
    finally:
        reset_engine()
        drop_database(url)


@pytest.fixture(scope="module")
def seeded(template_db: str) -> Iterator[dict[str, Principal]]:
    """A database of this module's own with the rows above; the principals by name."""
    with seeded_database(template_db, _seed) as people:
        yield people


# --------------------------------------------------------------------------- plans


@dataclass
class Plan:
    sql: str
    mode: str  # "custom" or "generic"
    tree: dict[str, Any]

    def nodes(self, node: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        node = node or self.tree
        yield node
        for child in node.get("Plans", []):
            yield from self.nodes(child)

    def outline(self, node: dict[str, Any] | None = None, depth: int = 0) -> list[str]:
        """The plan as one line per node: its type, relation and index."""
        node = node or self.tree
        parts = [node["Node Type"], node.get("Relation Name", ""), node.get("Index Name", "")]
        lines = ["  " * depth + " ".join(p for p in parts if p)]
        for child in node.get("Plans", []):
            lines += self.outline(child, depth + 1)
        return lines


def _captured(call: Callable[[Session], object], tables: tuple[str, ...] = TABLES) -> list[tuple[str, Any]]:
    """The statements ``call`` sends that read one of ``tables`` (interactions or runs), with their parameters."""
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if any(f" {t} " in f" {statement} " or f"{t}." in statement for t in tables):
            sent.append((statement, parameters))

    engine = get_engine()
    event.listen(engine, "before_cursor_execute", record)
    try:
        with transaction() as session:
            call(session)
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return sent


def plans_of(call: Callable[[Session], object], tables: tuple[str, ...] = TABLES) -> list[Plan]:
    sent = _captured(call, tables)
    plans = [plan for statement, parameters in sent for plan in explained(statement, parameters)]
    assert plans, f"the call sent no statement reading {' or '.join(tables)}"
    return plans


def explained(statement: str, parameters: Any) -> list[Plan]:
    """The statement's plans as PostgreSQL makes them for these parameters (custom) and for any (generic)."""
    plans = []
    for mode in ("custom", "generic"):
        with transaction() as session:
            conn = session.connection()
            conn.exec_driver_sql(f"SET LOCAL plan_cache_mode = force_{mode}_plan")
            found = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}", parameters).scalar_one()
        plans.append(Plan(statement, mode, (json.loads(found) if isinstance(found, str) else found)[0]["Plan"]))
    return plans


ONE_RUN = re.compile(r"\(\(?(run_)?id\)?(::text)? = ")  # an index condition pinning one run's rows (or one row)


def _scans(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The scans of interactions or runs under ``node`` not bounded on the way (a Limit, one run's rows)."""
    if node.get("Node Type") == "Limit":
        return
    if node.get("Relation Name") in TABLES and not ONE_RUN.match(node.get("Index Cond", "")):
        yield node
    for child in node.get("Plans", []):
        yield from _scans(child)


def problems(plan: Plan, index: str) -> list[str]:
    """What the module's rules find wrong with ``plan``, meant to be served by ``index``."""
    found = []
    for node in plan.nodes():
        kind = node.get("Node Type", "")
        if kind == "Seq Scan" and node.get("Relation Name") in TABLES:
            found.append(f"a sequential scan of {node['Relation Name']}")
        if kind in ("Sort", "Incremental Sort"):
            for scan in _scans(node["Plans"][0]):
                found.append(f"a sort of every row of {scan['Relation Name']} its {scan['Node Type']} reads")
    names = {node.get("Index Name") for node in plan.nodes()}
    if index not in names:
        found.append(f"{index} unused (indexes: {sorted(n for n in names if n)})")
    return found


# --------------------------------------------------------------------------- cases

ListCall = Callable[[Session, Principal, str | None], object]  # (session, caller, cursor)


def _interactions(name: str, **filters: Any) -> tuple[str, ListCall]:
    def call(session: Session, caller: Principal, cursor: str | None) -> object:
        args: dict[str, Any] = {"status": None, "target": None, "run_id": None, **filters}
        return access.list_interactions(session, caller, cursor=cursor, limit=PAGE, **args)

    return name, call


def _runs(name: str, **filters: Any) -> tuple[str, ListCall]:
    def call(session: Session, caller: Principal, cursor: str | None) -> object:
        args: dict[str, Any] = {"status": None, "workflow": None, **filters}
        return history.list_runs(session, caller, cursor=cursor, limit=PAGE, **args)

    return name, call


def _decisions(name: str, *, mine: bool = True, run_id: str | None = None) -> tuple[str, ListCall]:
    def call(session: Session, caller: Principal, cursor: str | None) -> object:
        return history.pending(session, caller, mine=mine, run_id=run_id, cursor=cursor, limit=PAGE)

    return name, call


def _after(session: Session, sql: str, ranked: bool) -> str:
    """The cursor of a row ten pages in (from its position, as a ``next`` encodes it; ``ranked``: in the
    "for me" view, among the waits that do not name the caller)."""
    from models.cursors import position_cursor, ranked_cursor

    row = session.execute(text(sql)).one()
    if ranked:
        return ranked_cursor(1, row.created_at, row.id, row.position)
    return position_cursor(row.created_at, row.id, getattr(row, "position", None))


TENTH_PENDING = (
    "SELECT created_at, position, id FROM interactions WHERE status = 'pending' "
    "ORDER BY created_at, position, id OFFSET 500 LIMIT 1"
)
TENTH_RUN = "SELECT created_at, id FROM runs ORDER BY created_at DESC, id DESC OFFSET 500 LIMIT 1"

BY_TARGET, BY_TIME, BY_RUN = "ix_interactions_target_listed", "ix_interactions_listed", "ix_interactions_run_id"
NAMING, ESCALATED = "ix_interaction_answerers_principal", "ix_interaction_answerers_target"
RUNS_BY_TARGET, RUNS_BY_TIME = "ix_runs_target_listed", "ix_runs_listed"

CASES: dict[str, tuple[tuple[str, ListCall], str, str | None]] = {
    # name: (the read, the index meant to serve it, the SQL of a row ten pages in when it pages by cursor)
    "interactions: human, pending": (_interactions(HUMAN, status="pending"), BY_TARGET, None),
    "interactions: human, pending, 10th page": (_interactions(HUMAN, status="pending"), BY_TARGET, TENTH_PENDING),
    "interactions: human, any status": (_interactions(HUMAN), BY_TARGET, None),
    "interactions: human, answered": (_interactions(HUMAN, status="answered"), BY_TARGET, None),
    "interactions: human, target": (_interactions(HUMAN, target="team:t7"), BY_TARGET, None),
    "interactions: human, run": (_interactions(HUMAN, run_id="wr77"), BY_RUN, None),
    "interactions: human, pending, what names it": (_interactions(HUMAN, status="pending"), NAMING, None),
    "interactions: human, pending, escalated to it": (_interactions(HUMAN, status="pending"), ESCALATED, None),
    "interactions: admin, pending": (_interactions(ADMIN, status="pending"), BY_TIME, None),
    "interactions: admin, pending, 10th page": (_interactions(ADMIN, status="pending"), BY_TIME, TENTH_PENDING),
    "interactions: admin, any status": (_interactions(ADMIN), BY_TIME, None),
    "interactions: admin, target": (_interactions(ADMIN, status="pending", target="team:t7"), BY_TARGET, None),
    "interactions: admin, run": (_interactions(ADMIN, run_id="wr77"), BY_RUN, None),
    "interactions: agent, pending": (_interactions(AGENT, status="pending"), BY_TIME, None),
    "interactions: agent, pending, 10th page": (_interactions(AGENT, status="pending"), BY_TIME, TENTH_PENDING),
    "interactions: agent, any status": (_interactions(AGENT), BY_TIME, None),
    "interactions: agent, target": (_interactions(AGENT, target="team:t7"), BY_TARGET, None),
    "interactions: agent, run": (_interactions(AGENT, run_id="wr77"), BY_RUN, None),
    "runs: human": (_runs(HUMAN), RUNS_BY_TARGET, None),
    "runs: human, 10th page": (_runs(HUMAN), RUNS_BY_TARGET, TENTH_RUN),
    "runs: human, workflow": (_runs(HUMAN, workflow="w1"), RUNS_BY_TARGET, None),
    "runs: admin": (_runs(ADMIN), RUNS_BY_TIME, None),
    "runs: admin, 10th page": (_runs(ADMIN), RUNS_BY_TIME, TENTH_RUN),
    "runs: agent, status": (_runs(AGENT, status="waiting"), RUNS_BY_TARGET, None),
    "decisions: human, for me": (_decisions(HUMAN), BY_TARGET, None),
    "decisions: human, for me, 10th page": (_decisions(HUMAN), BY_TARGET, TENTH_PENDING),
    "decisions: human, for me, what names it first": (_decisions(HUMAN), NAMING, None),
    "decisions: human, for me, escalated to it": (_decisions(HUMAN), ESCALATED, None),
    "decisions: human, all, what names it": (_decisions(HUMAN, mine=False), NAMING, None),
    "decisions: human, all": (_decisions(HUMAN, mine=False), BY_TARGET, None),
    "decisions: admin, all": (_decisions(ADMIN, mine=False), BY_TIME, None),
    "decisions: admin, all, 10th page": (_decisions(ADMIN, mine=False), BY_TIME, TENTH_PENDING),
    "decisions: admin, for me": (_decisions(ADMIN), BY_TARGET, None),
    "decisions: a run's card": (_decisions(HUMAN, run_id="wr77"), BY_RUN, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_plan__lists_and_pages_read_their_index_in_order_never_every_row(
    seeded: dict[str, Principal], case: str
) -> None:
    (name, call), index, tenth = CASES[case]

    # Given a cursor ten pages in, for the cases that page
    cursor = None
    if tenth is not None:
        with transaction() as session:
            cursor = _after(session, tenth, ranked=case.startswith("decisions") and "for me" in case)

    # When the read's statements are planned
    plans = plans_of(lambda session: call(session, seeded[name], cursor))

    # Then each plan reads its index in order, and no plan scans or sorts a whole table
    failing = [(p, found) for p in plans if (found := problems(p, index))]
    assert not failing, "\n\n".join(
        f"{p.mode} plan: {'; '.join(found)}\n" + "\n".join(p.outline()) for p, found in failing
    )
