"""Schema revisions (invariant 10) and the status vocabulary the store writes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError

from beat.sweep import run_sweep
from models import event_log, store
from models import status as st
from models.base import Base, utcnow
from models.fleet_tables import AdvertisedVersion
from models.tables import (
    Continuation,
    Event,
    Interaction,
    Principal,
    Review,
    Run,
    Step,
    ToolCall,
)
from models.team_tables import InteractionAnswerer, InteractionResponse
from models.webhook_tables import Webhook
from parkway.db import get_engine, reset_engine, transaction
from parkway.errors import SchemaMismatch
from parkway.migrate import (
    alembic_config,
    current_revision,
    head_revision,
    require_current_schema,
    schema_problem,
)
from parkway.migrate import upgrade as parkway_migrate
from tasks.sdk import answer, cancel
from tests.integration.helpers import execute_ready, parked
from tests.support import HUMAN, new_response_id, pass_time, start, wait_for


def test_migrations__upgrade_head_is_idempotent_and_matches_the_models(fresh_db: str) -> None:
    config = alembic_config()
    command.upgrade(config, "head")
    command.check(config)  # raises when the models and the migrations disagree
    assert current_revision(get_engine()) == head_revision()


def test_schema_problem__none_on_a_current_database(fresh_db: str) -> None:
    assert schema_problem(get_engine()) is None
    require_current_schema(get_engine())


def test_schema_problem__older_schema_says_run_parkway_migrate(fresh_db: str) -> None:
    # Given a database downgraded below this code's revision (here: to before any Parkway schema)
    reset_engine()
    command.downgrade(alembic_config(), "base")

    # Then the guard refuses it and says what to do
    problem = schema_problem(get_engine())
    assert problem is not None
    assert "no Parkway schema" in problem
    assert "parkway migrate" in problem
    with pytest.raises(SchemaMismatch):
        require_current_schema(get_engine())

    # And what `parkway migrate` runs brings it back to current
    assert parkway_migrate(get_engine()) == head_revision()
    assert schema_problem(get_engine()) is None
    command.check(alembic_config())


def test_schema_problem__unknown_revision_is_newer_than_this_code(fresh_db: str) -> None:
    # Given a database migrated by a later deploy (a revision id this code has never seen)
    with transaction() as session:
        session.execute(text("UPDATE alembic_version SET version_num = 'f00dfacefeed'"))

    problem = schema_problem(get_engine())

    assert problem is not None
    assert "newer than this code" in problem
    assert "f00dfacefeed" in problem
    with pytest.raises(SchemaMismatch):
        require_current_schema(get_engine())


# --------------------------------------------------------------------------- the status vocabulary


def test_status_enums__are_the_contract_names() -> None:
    assert {s.value for s in st.RunStatus} == {
        "running",
        "waiting",
        "completed",
        "failed",
        "canceled",
        "interrupted",
    }
    assert {s.value for s in st.InteractionStatus} == {
        "pending",
        "answered",
        "rejected",
        "canceled",
        "expired",
        "interrupted",
    }
    assert {s.value for s in st.StepStatus} == {
        "running",
        "parked",
        "resuming",
        "completed",
        "failed",
        "canceled",
        "interrupted",
    }
    assert {s.value for s in st.ContinuationStatus} == {"ready", "claimed", "consumed", "dead"}
    assert {s.value for s in st.InteractionKind} == {"question", "permission"}
    assert {s.value for s in st.PrincipalKind} == {"agent", "human", "admin", "worker", "auditor"}  # issues 33, 45


def test_status_enums__terminal_and_live_sets_partition_the_statuses() -> None:
    assert set(st.RunStatus) == st.RUN_TERMINAL | st.RUN_LIVE
    assert not st.RUN_TERMINAL & st.RUN_LIVE
    assert {s.value for s in st.RUN_LIVE} == {"running", "waiting"}
    assert {s.value for s in st.INTERACTION_TERMINAL} == set(st.InteractionStatus) - {"pending"}
    assert {s.value for s in st.STEP_TERMINAL} == {"completed", "failed", "canceled", "interrupted"}


def test_status_enums__every_status_the_store_writes_is_an_enum_member(actors_db: str) -> None:
    # Given runs driven through every outcome the store can write in-process
    completed, asked = parked("t.permission", {"cmd": "x"})
    answer(asked["shell"].id, {"approved": False}, response_id=new_response_id(), principal=HUMAN)
    execute_ready(completed)
    _approved, asked = parked("t.permission", {"cmd": "y"})
    answer(asked["shell"].id, {"approved": True}, response_id=new_response_id(), principal=HUMAN)
    _canceled, asked = parked("t.ask_two")
    cancel(asked["window"].id, response_id=new_response_id(), principal=HUMAN)
    _expired, asked = parked("t.ask_two", {"expires_in": 1})
    pass_time(30)
    run_sweep()
    interrupted, _ = parked("t.ask_one")
    with transaction() as session:
        store.interrupt_run(session, interrupted, reason="test", execution_id="test")
    failed = start("t.fail")
    execute_ready(failed)

    # Then every status stored is one the enums name, and each enum's statuses were all reached
    def stored(column: object) -> set[str]:
        with transaction() as session:
            return set(session.scalars(select(column).distinct()).all())  # type: ignore[call-overload]

    runs, steps = stored(Run.status), stored(Step.status)
    interactions, conts = stored(Interaction.status), stored(Continuation.status)
    assert runs <= {s.value for s in st.RunStatus}
    assert steps <= {s.value for s in st.StepStatus}
    assert interactions <= {s.value for s in st.InteractionStatus}
    assert conts <= {s.value for s in st.ContinuationStatus}
    assert runs == {"running", "waiting", "completed", "failed", "canceled", "interrupted"}
    assert interactions == {"pending", "answered", "rejected", "canceled", "expired", "interrupted"}
    assert {"parked", "resuming", "completed", "failed", "canceled", "interrupted"} <= steps
    assert {"ready", "consumed"} <= conts


# Every enum-like column, and the words the database must allow in it: exactly the enum's.
DATABASE_ENUMS: dict[tuple[str, str], Iterable[str]] = {
    ("principals", "kind"): st.PrincipalKind,
    ("runs", "status"): st.RunStatus,
    ("steps", "status"): st.StepStatus,
    ("interactions", "kind"): st.InteractionKind,
    ("interactions", "status"): st.InteractionStatus,
    ("continuations", "kind"): st.ContinuationKind,
    ("continuations", "status"): st.ContinuationStatus,
    ("advertised_versions", "kind"): st.ContinuationKind,
    ("reviews", "status"): st.ReviewStatus,
    ("tool_calls", "phase"): st.ToolPhase,
    ("tool_calls", "replay"): st.ToolReplay,
    ("webhooks", "status"): st.WebhookStatus,
    ("interaction_responses", "status"): st.InteractionStatus,
    ("interaction_answerers", "source"): st.AnswererSource,
}


def _quoted_words(clause: str) -> set[str]:
    return set(re.findall(r"'([^']*)'", clause))


def _database_checks() -> dict[str, str]:
    """Every CHECK constraint of the schema, by name, as the database's catalog states it."""
    with transaction() as session:
        rows = session.execute(
            text(
                "SELECT c.conname, pg_get_constraintdef(c.oid) FROM pg_constraint c "
                "JOIN pg_namespace n ON n.oid = c.connamespace "
                "WHERE c.contype = 'c' AND n.nspname = current_schema()"
            )
        ).all()
    return {name: clause for name, clause in rows}


def test_status_enums__equal_what_the_database_allows(fresh_db: str) -> None:
    expected = {
        f"ck_{table}_{column}": {str(word) for word in words} for (table, column), words in DATABASE_ENUMS.items()
    }

    # The database's own constraints (as the migrations made them): one per enum column, exactly its words
    checks = _database_checks()
    assert {name: _quoted_words(clause) for name, clause in checks.items()} == expected
    for table, column in DATABASE_ENUMS:
        assert re.search(rf"\b{column}\b", checks[f"ck_{table}_{column}"])

    # And the models declare the same ones (``alembic check`` does not compare CHECK constraints)
    declared = {
        str(constraint.name): _quoted_words(str(constraint.sqltext.compile(compile_kwargs={"literal_binds": True})))
        for table in Base.metadata.tables.values()
        for constraint in table.constraints
        if isinstance(constraint, sa.CheckConstraint)
    }
    assert declared == expected


def test_status_columns__refuse_a_word_the_enums_do_not_name(fresh_db: str) -> None:
    # Given one row in every table with an enum column, each with words the enums name (accepted)
    with transaction() as session:
        session.add(Principal(id="p", kind="agent", name="ck-bot"))
        session.flush()
        session.add(Run(id="r", workflow="w", status="running", owner_id="p", target="t", payload={}))
        session.flush()
        session.add(Step(id="s", run_id="r", seq=0, name="n", status="running"))
        session.flush()
        session.add_all(
            [
                Interaction(id="i", run_id="r", step_id="s", key="k", kind="question", target="t", status="pending"),
                Continuation(id="c", run_id="r", step_id="s", kind="start", name="n", status="ready"),
                Review(id="v", run_id="r", step_id="s", kind="k", status="running", execution_id="e"),
                ToolCall(
                    id="tc",
                    run_id="r",
                    step_id="s",
                    key="k",
                    name="n",
                    args_digest="d",
                    replay="safe",
                    phase="executing",
                ),
                AdvertisedVersion(kind="resume", key="n@1", last_seen_at=utcnow()),
                Webhook(id="w", url="u", events=["*"], secret_sealed="x", status="active", cursor=0, due_at=utcnow()),
            ]
        )
        session.flush()
        session.add_all(
            [
                InteractionResponse(interaction_id="i", principal_id="p", place_id="p", response_id="r",
                                    response_digest="d", status="pending", level=0),
                InteractionAnswerer(interaction_id="i", source="assignee", principal_id="p"),
            ]
        )  # fmt: skip

    # Then inserting a run with a word no enum names (here a legacy one, normalized by 0009) is refused
    with pytest.raises(IntegrityError), transaction() as session:
        session.add(Run(id="r2", workflow="w", status="success", owner_id="p", target="t", payload={}))

    # And so is setting any enum column to an unknown word
    accepted = []
    for table, column in DATABASE_ENUMS:
        try:
            with transaction() as session:
                session.execute(text(f"UPDATE {table} SET {column} = 'bogus'"))
        except IntegrityError:
            continue
        accepted.append(f"{table}.{column}")
    assert accepted == []
    # ("running" is a run status but no history status: the history, a view since 0028, shows terminal runs only)
    with transaction() as session:
        assert session.scalars(text("SELECT DISTINCT status FROM schedule_history")).all() == []  # "r" is live


# --------------------------------------------------------------------------- 0004: events ordered by transaction


def test_migration_0004__old_events_keep_their_seqs_and_new_ones_sort_after_them(fresh_db: str) -> None:
    # Given a database at 0003 (seqs from a sequence) holding a run and its events, written as that schema
    reset_engine()
    command.downgrade(alembic_config(), "0003")
    at = {"at": "2026-12-01 00:00:00"}
    with transaction() as session:
        session.execute(
            text("INSERT INTO principals (id, kind, name, created_at) VALUES ('p0003', 'agent', 'bot0003', :at)"), at
        )
        session.execute(
            text(
                "INSERT INTO runs (id, workflow, status, owner_id, target, payload, created_at, updated_at, "
                "projection_pending) VALUES ('r0003', 't.ask_one', 'running', 'p0003', 'team:ops', '{}', :at, :at, "
                "false)"
            ),
            at,
        )
        for k in range(3):
            session.execute(
                text("INSERT INTO events (run_id, type, at, data) VALUES ('r0003', :type, :at, '{}')"),
                {**at, "type": f"old.{k}"},
            )
    old = [int(s) for s in _event_seqs("r0003")]
    assert len(old) == 3

    # When it is upgraded to this code's schema
    reset_engine()
    command.upgrade(alembic_config(), "head")
    command.check(alembic_config())

    # Then the old events keep their seqs, and an event written now sorts after every one of them
    with transaction() as session:
        store.append_event(session, "r0003", "new.0")
        xid = session.scalar(text("SELECT pg_current_xact_id()::text::bigint"))
    seqs = _event_seqs("r0003")
    assert seqs[:3] == old and len(seqs) == 4 and seqs[3] > max(old)
    assert seqs[3] == int(xid) << 16 | 1  # numbered by its transaction now, no longer by the old sequence

    # And a reader from the start gets all of them, in order (once no writer in the cluster holds them back)
    def delivered() -> list[int]:
        with transaction() as session:
            return [e.seq for e in event_log.run_events(session, "r0003", after=0, limit=10).items]

    assert wait_for(lambda: delivered() == seqs, what="old and new events delivered")


def _event_seqs(run_id: str) -> list[int]:
    with transaction() as session:
        return list(session.scalars(select(Event.seq).where(Event.run_id == run_id).order_by(Event.seq)))


# --------------------------------------------------------------------------- 0009: statuses checked by the database

LEGACY_RUNS = {  # run id -> (the word old code stored, its warnings, the word 0009 stores)
    "r-success": ("success", None, "completed"),
    "r-succeeded": ("succeeded", None, "completed"),
    "r-error": ("error", None, "failed"),
    "r-stopped": ("stopped", None, "canceled"),
    "r-cancelled": ("cancelled", None, "canceled"),
    "r-persistence": ("completed_with_persistence_error", None, "completed"),
    "r-persistence-warned": ("completed_with_persistence_error", ["an earlier warning"], "completed"),
    "r-waiting": ("waiting", None, "waiting"),
}
# runs.status is VARCHAR(16): no database of 0008 can hold a longer word
LEGACY_RUNS = {run_id: row for run_id, row in LEGACY_RUNS.items() if len(row[0]) <= 16}


def test_migration_0009__normalizes_legacy_words_and_keeps_every_index(fresh_db: str) -> None:
    # Given a database at 0008 holding runs with every legacy status word (one with a step), and a
    # schedule-history row projected by old code with a legacy word
    config = alembic_config()
    indexes_at_head = _index_definitions()
    reset_engine()
    command.downgrade(config, "0008")
    indexes_at_0008 = _index_definitions()
    at = {"at": "2026-12-01 00:00:00"}
    with transaction() as session:
        session.execute(
            text("INSERT INTO principals (id, kind, name, created_at) VALUES ('p0008', 'agent', 'bot0008', :at)"), at
        )
        for run_id, (word, warnings, _) in LEGACY_RUNS.items():
            session.execute(
                sa.text(
                    "INSERT INTO runs (id, workflow, status, owner_id, target, payload, warnings, created_at, "
                    "updated_at, completed_at, projection_pending) VALUES (:id, 'w', :status, 'p0008', 'team:ops', "
                    "'{}', :warnings, :at, :at, :at, false)"
                ).bindparams(sa.bindparam("warnings", type_=sa.JSON)),
                {**at, "id": run_id, "status": word, "warnings": warnings},
            )
        session.execute(
            text(
                "INSERT INTO steps (id, run_id, seq, name, status, created_at, updated_at) "
                "VALUES ('s0008', 'r-waiting', 0, 'n', 'parked', :at, :at)"
            ),
            at,
        )
        session.execute(
            text(
                "INSERT INTO schedule_history (run_id, workflow, status, completed_at, execution_id, recorded_at) "
                "VALUES ('r-success', 'w', 'success', :at, 'e', :at)"
            ),
            at,
        )
    read_before = {run_id: _read(word, warnings) for run_id, (word, warnings, _) in LEGACY_RUNS.items()}

    # When it is upgraded
    reset_engine()
    command.upgrade(config, "head")
    command.check(config)

    # Then each run holds its canonical word and reads exactly as before (a legacy warning kept in warnings)
    with transaction() as session:
        rows = session.execute(text("SELECT id, status, warnings FROM runs")).all()
        history = session.scalar(text("SELECT status FROM schedule_history WHERE run_id = 'r-success'"))
    stored = {row.id: (row.status, _json(row.warnings)) for row in rows}
    assert {run_id: status for run_id, (status, _) in stored.items()} == {
        run_id: canonical for run_id, (_, _, canonical) in LEGACY_RUNS.items()
    }
    assert {run_id: _read(status, warnings) for run_id, (status, warnings) in stored.items()} == read_before
    if "r-persistence-warned" in stored:
        assert stored["r-persistence-warned"][1] == ["an earlier warning", "completed with a persistence error"]
    assert history == "completed"

    # And every index is as it was
    assert _index_definitions() == indexes_at_head

    # And the downgrade, with these rows in place, drops the checks and keeps the indexes too
    reset_engine()
    command.downgrade(config, "0008")
    assert _index_definitions() == indexes_at_0008
    assert _database_checks() == {}
    reset_engine()
    command.upgrade(config, "head")
    command.check(config)


def _read(word: str, warnings: list[str] | None) -> tuple[str, list[str]]:
    """A run's status and warnings as the API and the projections read them."""
    status, warning = st.normalize_run_status(word)
    return status.value, [*(warnings or []), *([warning] if warning else [])]


def _json(value: object) -> object:
    return json.loads(value) if isinstance(value, str) else value


def _index_definitions() -> dict[str, str]:
    with transaction() as session:
        rows = session.execute(text("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"))
        return {name: definition for name, definition in rows.all()}


def test_migration_0009__names_a_word_no_status_names_and_stops(fresh_db: str) -> None:
    # Given a database at 0008 with a principal kind no enum names (nor any legacy word)
    config = alembic_config()
    reset_engine()
    command.downgrade(config, "0008")
    with transaction() as session:
        session.execute(
            text("INSERT INTO principals (id, kind, name, created_at) VALUES ('p1', 'robot', 'r2', '2026-12-01')")
        )

    # Then the upgrade stops before any constraint, naming the row's column and word
    reset_engine()
    with pytest.raises(RuntimeError, match=r"principals\.kind = 'robot'"):
        command.upgrade(config, "head")
    reset_engine()
    assert current_revision(get_engine()) == "0008"
