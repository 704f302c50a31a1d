"""The event log stored as one row per writing statement and run (issue 42, migration 0026): a completion
writes its events as two rows, readers still see one event per ``seq`` in order, and every read of the log
after a cursor goes through an index of the batches, never the whole log (EXPLAIN, not a timing)."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from models import access, event_log, seal_reads, store, webhooks
from models.store import webhooks as store_webhooks
from models.tables import Event, Principal
from models.webhook_tables import Webhook
from parkway.db import get_engine, transaction
from tests.integration.helpers import answer_in, execute_ready, parked
from tests.integration.test_list_plans import plans_of
from tests.support import ADMIN

BATCHES = 100_000  # of three events each, over as many runs as there are batches / 10


def _batches(run_id: str) -> list[tuple[int, int]]:
    """The run's batch rows: (first seq, how many events)."""
    with transaction() as session:
        rows = session.execute(
            text("SELECT first_seq, json_array_length(events) FROM event_batches WHERE run_id = :r ORDER BY first_seq"),
            {"r": run_id},
        )
        return [(int(first), int(k)) for first, k in rows]


def _seqs(run_id: str) -> list[tuple[int, str]]:
    with transaction() as session:
        return [(s, t) for s, t in session.execute(select(Event.seq, Event.type).where(Event.run_id == run_id))]


def test_event_batches__a_completion_writes_its_five_events_as_two_rows_read_as_five(actors_db: str) -> None:
    # Given a parked wait
    run_id, asked = parked("t.ask_one")
    before = _batches(run_id)
    # When it is answered and its continuation runs to the run's end
    with transaction() as session:
        answer_in(session, asked["go"].id, "yes")
    execute_ready(run_id)
    # Then the answer wrote one row of two events and the commit one of three
    written = _batches(run_id)[len(before) :]
    assert [k for _, k in written] == [2, 3], written
    # And readers see five events, one per seq, numbered on from each row's first
    events = sorted(_seqs(run_id))[-5:]
    assert [t for _, t in events] == [
        "interaction.answered", "continuation.ready", "step.resumed", "step.completed", "run.completed"
    ]  # fmt: skip
    assert [s for s, _ in events] == [
        written[0][0], written[0][0] + 1, written[1][0], written[1][0] + 1, written[1][0] + 2
    ]  # fmt: skip


def test_event_batches__one_statement_s_events_of_several_runs_keep_their_order(actors_db: str) -> None:
    # Given two runs
    first, _ = parked("t.ask_one")
    second, _ = parked("t.ask_one")
    # When one statement appends events of one, the other, then the first again
    with transaction() as session:
        rows = [store.event_row(first, "test.a"), store.event_row(second, "test.b"), store.event_row(first, "test.c")]
        store.append_events(session, rows)
    # Then each stretch of one run is a row, and the seqs follow the order they were listed in
    with transaction() as session:
        found = session.execute(select(Event.seq, Event.type, Event.batch_seq).where(Event.type.like("test.%")))
        by_seq = sorted(found)
    assert [t for _, t, _ in by_seq] == ["test.a", "test.b", "test.c"]
    assert len({b for _, _, b in by_seq}) == 3


def _seed() -> None:
    """``BATCHES`` batches of three events each, one transaction's each (``seq`` blocks of 65536 apart), of
    ``BATCHES // 10`` completed runs."""
    with transaction() as session:
        session.execute(
            text(
                "INSERT INTO runs (id, workflow, status, owner_id, target, payload, created_at, updated_at, "
                "completed_at, projection_pending) SELECT 'x' || g, 'w', 'completed', p.id, 'team:ops', '{}', "
                "now(), now(), now(), false FROM generate_series(0, :runs - 1) AS g, principals AS p "
                "WHERE p.name = :owner"
            ),
            {"runs": BATCHES // 10, "owner": ADMIN},
        )
        session.execute(
            text(
                "INSERT INTO event_batches (first_seq, run_id, at, events) SELECT (g::bigint << 16) | 1, "
                "'x' || (g % :runs), now(), json_build_array(json_build_object('type', 'step.completed', 'data', "
                "json_build_object('run_id', 'x' || (g % :runs))), json_build_object('type', 'run.completed', "
                "'data', '{}'::json), json_build_object('type', 'interaction.answered', 'data', "
                "json_build_object('interaction_id', 'i' || g))) FROM generate_series(1, :n) AS g"
            ),
            {"n": BATCHES, "runs": BATCHES // 10},
        )
    with get_engine().connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE event_batches, runs"))


def test_plan__every_read_of_the_log_after_a_cursor_reads_a_range_of_the_batches_never_the_log(
    actors_db: str,
) -> None:
    # Given 300,000 events in 100,000 batches, and a cursor in the middle of them
    _seed()
    middle = (BATCHES // 2) << 16
    with transaction() as session:
        admin = session.scalars(select(Principal).where(Principal.name == ADMIN)).one()
        session.expunge(admin)
    hook = Webhook(id="w", cursor=middle, events=["*"], targets=None)
    reads: dict[str, Callable[[Session], object]] = {
        "the stream": lambda s: event_log.visible_events(s, admin, after=middle, limit=100),
        "a run's events": lambda s: event_log.run_events(s, "x7", after=middle, limit=100),
        "the seal": lambda s: seal_reads.entries_after(s, middle, limit=100),
        "a webhook's due events": lambda s: webhooks.due_events(s, hook, limit=10),
        "the webhooks' oldest pending": webhooks.oldest_pending,
        "the webhooks due": lambda s: store_webhooks.due_webhooks(s, batch=10, republish_after_s=5),
        "recently closed": lambda s: access.recently_closed(s, admin, scan=100),
    }
    # When each is planned, then none reads every batch: each is a range of an index of event_batches
    for name, read in reads.items():
        for plan in plans_of(read, ("events",)):
            scans = {(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in plan.nodes()}
            of_batches = {s for s in scans if s[1] == "event_batches"}
            assert of_batches, (name, plan.mode, plan.outline())
            assert all(kind != "Seq Scan" for kind, _, _ in of_batches), (name, plan.mode, plan.outline())
