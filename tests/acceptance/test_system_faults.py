"""A system fault is never the workflow's verdict: a database error raised by PostgreSQL under one of the
SDK's own writes inside a body (here the tool journal's intent), or under the outcome's commit, re-drives
the execution like a crash, and out of attempts ends the run ``interrupted`` with the reason, never
``failed``."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from parkway.db import transaction
from tests.support import Stack, continuations, effects, event_types, run_row, run_status, start, wait_for

pytestmark = pytest.mark.usefixtures("own_workers")

# A trigger on a table's inserts raises ``sqlstate`` for the runs listed for it in ``test_db_faults``, their first
# ``times`` inserts only: a sequence counts them, since a count in a table would roll back with the insert
# that raised.
FAULTS_DDL = (
    "CREATE TABLE IF NOT EXISTS test_db_faults"
    " (run_id text, on_table text, sqlstate text NOT NULL, times int NOT NULL, counter regclass NOT NULL,"
    " PRIMARY KEY (run_id, on_table))",
    """CREATE OR REPLACE FUNCTION test_db_fault() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE fault test_db_faults;
    BEGIN
        SELECT * INTO fault FROM test_db_faults WHERE run_id = NEW.run_id AND on_table = TG_TABLE_NAME;
        IF FOUND AND nextval(fault.counter) <= fault.times THEN
            RAISE EXCEPTION 'a fault injected by the test' USING ERRCODE = fault.sqlstate;
        END IF;
        RETURN NEW;
    END $$""",
    "DROP TRIGGER IF EXISTS test_db_fault ON {table}",
    "CREATE TRIGGER test_db_fault BEFORE INSERT ON {table} FOR EACH ROW {when} EXECUTE FUNCTION test_db_fault()",
)
# The journal's intent; a row only the outcome's commit writes: the batch of events ending the run (the
# schedule-history row it wrote before is a view since 0028).
JOURNAL, HISTORY = "tool_calls", "event_batches"
WHEN = {HISTORY: """WHEN (strpos(NEW.events::text, '"run.completed"') > 0)"""}

DEADLOCK, UNIQUE_VIOLATION, SERIALIZATION = "40P01", "23505", "40001"
NAMED = {  # how the worker's line names each fault: its classes and SQLSTATE, never its text
    DEADLOCK: "OperationalError (DeadlockDetected, SQLSTATE 40P01)",
    UNIQUE_VIOLATION: "IntegrityError (UniqueViolation, SQLSTATE 23505)",
    SERIALIZATION: "OperationalError (SerializationFailure, SQLSTATE 40001)",
}
ENDED = ("completed", "failed", "interrupted", "canceled")


def _faulty_run(sqlstate: str, times: int, table: str = JOURNAL) -> str:
    """A run of ``t.tool`` whose inserts into ``table`` raise ``sqlstate`` ``times`` times, started while no
    worker runs (so its fault is in place before its body runs)."""
    run_id = start("t.tool", {"replay": "never"})
    counter = f"test_fault_{uuid.uuid4().hex}"
    with transaction() as session:
        for statement in (*FAULTS_DDL, f"CREATE SEQUENCE {counter}"):
            session.connection().exec_driver_sql(statement.format(table=table, when=WHEN.get(table, "")))
        session.execute(
            text("INSERT INTO test_db_faults VALUES (:r, :t, :s, :n, CAST(:c AS regclass))"),
            {"r": run_id, "t": table, "s": sqlstate, "n": times, "c": counter},
        )
    return run_id


def _ended(run_id: str, *, sweep: bool) -> str:
    return wait_for(lambda: run_status(run_id) in ENDED and run_status(run_id), timeout=60, sweep=sweep,
                    what=f"run {run_id} to end")  # fmt: skip


def _completed_once_re_driven(stack: Stack, run_id: str) -> str:
    """A worker runs ``run_id``, whose first execution meets its fault: the execution stops and its
    continuation published again at once (no sweep runs), and the next one completes the run, the tool run
    once and nothing of the first execution's commit kept. Returns the worker's log."""
    worker = stack.start_worker()
    status = _ended(run_id, sweep=False)
    run = run_row(run_id)
    assert (status, run.error) == ("completed", None)
    assert run.result == {"out": "did tool"}
    assert effects(run_id, "tool") == 1
    assert [c.attempts for c in continuations(run_id)] == [2]
    assert event_types(run_id).count("run.completed") == 1 and "run.failed" not in event_types(run_id)
    log = worker.text()
    assert "a fault injected by the test" not in log  # named by its classes, never its text
    return log


@pytest.mark.parametrize("sqlstate", [DEADLOCK, UNIQUE_VIOLATION])
def test_journal_write_hits_a_database_error__re_driven_and_completed_never_failed(stack: Stack, sqlstate: str) -> None:
    # Given a step whose tool call's journal write fails once, raised by PostgreSQL itself
    run_id = _faulty_run(sqlstate, times=1)
    # When a worker runs it, then the execution that met the fault was released, not failed
    log = _completed_once_re_driven(stack, run_id)
    assert f"nothing committed: the database failed under the SDK's own write: {NAMED[sqlstate]}" in log


def test_journal_write_always_failing__out_of_attempts_interrupted_with_the_reason_never_failed(
    stack: Stack,
) -> None:
    # Given a step whose tool call's journal write always fails with a deadlock, two attempts allowed
    run_id = _faulty_run(DEADLOCK, times=1000)
    two_attempts = {"PARKWAY_MAX_ATTEMPTS": "2"}
    # When workers and beat drive it
    stack.start_worker(**two_attempts)
    stack.start_beat(**two_attempts)
    status = _ended(run_id, sweep=False)
    # Then it is given up as the system's failure, with the reason; the tool never ran
    run = run_row(run_id)
    assert (status, run.error) == ("interrupted", None)
    assert run.reason is not None and "gave up after 2 attempts" in run.reason
    assert "DeadlockDetected" in run.reason
    assert [(c.status, c.attempts) for c in continuations(run_id)] == [("dead", 2)]
    assert effects(run_id, "tool") == 0
    assert "run.failed" not in event_types(run_id)


def test_outcome_commit_hits_a_database_error__re_driven_and_completed_never_failed(stack: Stack) -> None:
    # Given a step whose outcome's commit fails once (a serialization failure in one of its inserts)
    run_id = _faulty_run(SERIALIZATION, times=1, table=HISTORY)
    # When a worker runs it, then that commit is given up on and released, and the next execution commits the tool's
    # outcome as journaled
    log = _completed_once_re_driven(stack, run_id)
    assert f"nothing committed: the database failed under the outcome's commit: {NAMED[SERIALIZATION]}" in log
    assert "raised unexpected" not in log  # one line, not a task's traceback
