"""The sweep's fail-closed selections are served by their indexes on tables big enough for the planner to
care: EXPLAIN on a seeded database, not a timing (issue 31 §4)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.dialects import postgresql

from beat.sweep import run_sweep
from models import fail_closed, store
from parkway.db import get_engine, reset_engine, transaction
from tests.conftest import database_of_its_own
from tests.integration.helpers import advertise, make_actors
from tests.integration.test_list_plans import plans_of
from tests.support import AGENT, HUMAN

WAITS = 20_000
ENDED = 200_000  # ended runs: most of a real runs table
KEYS = 4  # distinct continuation versions the waits are parked on


def _seed() -> None:
    """``WAITS`` parked runs, each a step and a pending question, spread over ``KEYS`` versions."""
    series = "FROM generate_series(1, :n) AS g"
    with transaction() as session:
        owner = session.execute(text("SELECT id FROM principals WHERE name = :a"), {"a": AGENT}).scalar_one()
        session.execute(
            text("INSERT INTO runs (id, workflow, status, owner_id, target, payload, created_at, updated_at, "
                 "projection_pending) SELECT 'r' || g, 'w', 'waiting', :o, 'team:waits', '{}', now(), now(), false "
                 + series),
            {"n": WAITS, "o": owner},
        )  # fmt: skip
        session.execute(
            text("INSERT INTO steps (id, run_id, seq, name, status, continuation, created_at, updated_at) "
                 f"SELECT 's' || g, 'r' || g, 1, 'w', 'parked', 'k' || (g % :k) || '@1', now(), now() {series}"),
            {"n": WAITS, "k": KEYS},
        )  # fmt: skip
        session.execute(
            text("INSERT INTO interactions (id, run_id, step_id, key, kind, target, status, continuation, created_at) "
                 "SELECT 'i' || g, 'r' || g, 's' || g, 'go', 'question', 'team:ops', 'pending', "
                 f"'k' || (g % :k) || '@1', now() - make_interval(secs => g) {series}"),
            {"n": WAITS, "k": KEYS},
        )  # fmt: skip
        # Ten times as many ended runs of the same owner (each a step and a consumed continuation), and
        # revocations the sweep has long swept
        session.execute(
            text("INSERT INTO runs (id, workflow, status, owner_id, target, payload, created_at, updated_at, "
                 "completed_at, projection_pending) SELECT 'x' || g, 'w', 'completed', :o, 'team:ops', '{}', now(), "
                 "now(), now(), false " + series),
            {"n": ENDED, "o": owner},
        )  # fmt: skip
        session.execute(
            text("INSERT INTO steps (id, run_id, seq, name, status, result, created_at, updated_at) "
                 "SELECT 'xs' || g, 'x' || g, 1, 'w', 'completed', '{}', now(), now() " + series),
            {"n": ENDED},
        )  # fmt: skip
        session.execute(
            text("INSERT INTO continuations (id, run_id, step_id, kind, name, status, attempts, publishes, "
                 "enqueued_at, claimed_by, created_at, consumed_at) SELECT 'xc' || g, 'x' || g, 'xs' || g, "
                 "'start', 'w', 'consumed', 1, 1, now(), 'e', now(), now() " + series),
            {"n": ENDED},
        )  # fmt: skip
        session.execute(
            text("INSERT INTO grants (id, principal_id, target, created_at, revoked_at, swept_at) "
                 "SELECT 'g' || g, :o, 'team:' || g, now(), now(), now() " + series),
            {"n": WAITS, "o": owner},
        )  # fmt: skip
    with transaction() as session:
        session.execute(text("ANALYZE runs, steps, interactions, continuations, grants"))


@pytest.fixture(scope="module")
def seeded_template(template_db: str) -> Iterator[str]:
    """A database with the actors and ``_seed``'s rows, analyzed, seeded once for the module: each test clones
    it (a copy of its files) instead of inserting and indexing its 640,000 rows again."""
    with database_of_its_own(template_db) as url:
        make_actors()
        _seed()
        reset_engine()  # nothing may stay connected to a template
        yield url


@pytest.fixture
def seeded_db(seeded_template: str) -> Iterator[str]:
    """A database of this test's own, cloned from ``seeded_template``."""
    with database_of_its_own(seeded_template) as url:
        yield url


def _plan(statement: Any, params: dict[str, Any]) -> str:
    """PostgreSQL's plan of ``statement`` with ``params`` (rendered into its text)."""
    sql = statement.params(params).compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
    with transaction() as session:
        return "\n".join(session.execute(text(f"EXPLAIN {sql}")).scalars())


def test_plan__waits_on_unserved_versions_are_found_through_the_index_never_a_scan_of_every_wait(
    seeded_db: str,
) -> None:
    # Given many waits over a few versions, one of which no live worker runs
    advertise("worker@host", continuations=tuple(f"k{k}@1" for k in range(1, KEYS)))

    # When the sweep's selection is planned
    plan = _plan(fail_closed._UNSERVED_WAITS, {"grace": -600.0, "n": 500})

    # Then it reads the pending waits by continuation through their index, and never scans them all
    assert "ix_interactions_pending_continuation" in plan, plan
    assert "Seq Scan on interactions" not in plan, plan


def test_plan__revocations_to_sweep_are_read_from_their_queue_and_an_owner_s_live_runs_by_index(
    seeded_db: str,
) -> None:
    # Given many waits and as many ended runs of one owner (those on team:ops), and many revocations swept
    with transaction() as session:
        owner = session.execute(text("SELECT id FROM principals WHERE name = :a"), {"a": AGENT}).scalar_one()

    # When the revoked category's two reads are planned
    queue = _plan(fail_closed._REVOCATIONS, {"n": 500})
    runs = _plan(fail_closed._LIVE_RUNS, {"pid": owner, "target": "team:ops", "n": 500})

    # Then the queue is its partial index (empty when nothing was revoked since), and the owner's live runs
    # on team:ops a range of theirs, not a walk of its ended ones: never a walk of every wait, run or grant
    assert "ix_grants_unswept" in queue and "Seq Scan on grants" not in queue, queue
    assert "ix_runs_live_owner" in runs and "Seq Scan on runs" not in runs, runs


BIG = ("interactions", "runs", "steps", "continuations", "event_batches", "grants")  # the log: its batches (0026)


def _sent_by(call: Any) -> list[tuple[str, Any]]:
    """The statements ``call`` sends through SQLAlchemy, with their parameters."""
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "UPDATE", "WITH", "INSERT", "DELETE")):
            sent.append((statement, parameters))

    engine = get_engine()
    event.listen(engine, "before_cursor_execute", record)
    try:
        call()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return sent


def test_plan__an_idle_sweep_pass_scans_no_big_table(seeded_db: str) -> None:
    # Given 20,000 waits, 200,000 ended runs with their steps and consumed continuations, 20,000 swept
    # revocations, and a live worker serving every version: nothing is due
    advertise("worker@host", continuations=tuple(f"k{k}@1" for k in range(KEYS)))

    # When every statement a sweep pass sends is planned
    sent = _sent_by(run_sweep)
    plans = []
    for statement, parameters in sent:
        with transaction() as session:
            found = session.connection().exec_driver_sql(f"EXPLAIN {statement}", parameters).scalars()
            plans.append("\n".join(found))

    # Then none reads a whole big table: each category is an index range, bounded by its batch
    scans = [plan for plan in plans if any(f"Seq Scan on {table}" in plan for table in BIG)]
    assert len(plans) >= 7, sent  # every category's reads
    assert not scans, "\n\n".join(scans)


def test_plan__a_stream_of_one_run_reads_that_run_s_range_of_events_never_the_log(seeded_db: str) -> None:
    # Given 200,000 ended runs with two events each (400,000 events), and a person granted on their target (ana)
    with transaction() as session:
        session.execute(
            text("INSERT INTO events (seq, run_id, type, at, data) SELECT g, 'x' || (g % :n + 1), 'step.completed', "
                 "now(), '{}' FROM generate_series(1, 2 * :n) AS g"),
            {"n": ENDED},
        )  # fmt: skip
        session.execute(text("ANALYZE events"))
        person = session.execute(text("SELECT * FROM principals WHERE name = :h"), {"h": HUMAN}).one()
    from models import event_log
    from models.tables import Principal

    reader = Principal(id=person.id, kind=person.kind, name=person.name)

    # When the stream's poll of one run is planned, custom and generic (psycopg prepares repeated statements)
    plans = plans_of(lambda session: event_log.visible_events(session, reader, after=0, limit=100, run_id="x77"))

    # Then each reads the run's range of ix_events_run_seq, never the whole log in seq order
    for plan in plans:
        scans = {(node["Node Type"], node.get("Relation Name"), node.get("Index Name")) for node in plan.nodes()}
        assert any(index == "ix_events_run_seq" for _, _, index in scans), plan.outline()
        assert ("Seq Scan", "event_batches", None) not in scans, plan.outline()


def _driver_plans(statement: Any, given: dict[str, Any]) -> list[str]:
    """PostgreSQL's plans of a statement run as a ``DriverStatement`` (no cursor events to capture it), with
    its binds from ``given``: custom and generic (psycopg prepares repeated statements)."""
    compiled = statement.compile(dialect=get_engine().dialect)
    params = {name: given.get(name, bind.value) for bind, name in compiled.bind_names.items()}
    plans = []
    for mode in ("custom", "generic"):
        with transaction() as session:
            conn = session.connection()
            conn.exec_driver_sql(f"SET LOCAL plan_cache_mode = force_{mode}_plan")
            plans.append("\n".join(conn.exec_driver_sql(f"EXPLAIN {compiled.string}", params).scalars()))
    return plans


def test_plan__a_lease_call_takes_its_items_through_the_remote_index_granted_runs_only(seeded_db: str) -> None:
    # Given the seeded runs, 40,000 of them with a due remote resume over a few keys (the waits on
    # team:waits, as many ended ones on team:ops), and a worker granted on team:ops
    from models.store import leases

    with transaction() as session:
        session.execute(
            text("INSERT INTO continuations (id, run_id, step_id, kind, name, status, attempts, publishes, "
                 "enqueued_at, created_at, remote) SELECT 'rc' || run || g, run || g, step || g, 'resume', "
                 "'k' || (g % :k) || '@1', 'ready', 0, 1, now(), now() - make_interval(secs => g), true "
                 "FROM generate_series(1, :n) AS g, (VALUES ('r', 's'), ('x', 'xs')) AS seeded(run, step)"),
            {"n": WAITS, "k": KEYS},
        )  # fmt: skip
        worker = store.create_principal(session, kind="worker", name="plan-worker", token_hash=None)
        assert worker is not None
        store.create_grant(session, principal_id=worker.id, target="team:ops")
    with transaction() as session:
        session.execute(text("ANALYZE continuations, grants, principals"))

    # When a lease call for one key is planned, custom and generic
    given = {"steps": [], "conts": ["k1@1"], "n": 10, "lease_s": 30.0, "max_attempts": 5, "pid": worker.id}
    plans = _driver_plans(leases._LEASE.statement, given)

    # Then each reads that key's range of ix_continuations_remote, never the whole table
    for plan in plans:
        assert "ix_continuations_remote" in plan and "Seq Scan on continuations" not in plan, plan
