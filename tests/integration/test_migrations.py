"""Schema revisions (invariant 10) and the status vocabulary the store writes (SPEC §2)."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import select, text

from beat.sweep import run_sweep
from models import access, store
from models import status as st
from models.tables import Continuation, Event, Interaction, Run, Step
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
from tests.conftest import BACKEND
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
    assert {s.value for s in st.PrincipalKind} == {"agent", "human", "admin"}


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
        xid = session.scalar(text("SELECT pg_current_xact_id()::text::bigint")) if BACKEND == "postgres" else None
    seqs = _event_seqs("r0003")
    assert seqs[:3] == old and len(seqs) == 4 and seqs[3] > max(old)
    if xid is not None:  # numbered by its transaction now, no longer by the old sequence
        assert seqs[3] == int(xid) << 16 | 1

    # And a reader from the start gets all of them, in order (once no writer in the cluster holds them back)
    def delivered() -> list[int]:
        with transaction() as session:
            return [e.seq for e in access.run_events(session, "r0003", after=0, limit=10).items]

    assert wait_for(lambda: delivered() == seqs, what="old and new events delivered")


def _event_seqs(run_id: str) -> list[int]:
    with transaction() as session:
        return list(session.scalars(select(Event.seq).where(Event.run_id == run_id).order_by(Event.seq)))
