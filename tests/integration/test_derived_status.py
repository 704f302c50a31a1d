"""A run's ``running`` and a step's ``resuming`` after the answer that makes the step's continuation due are
derived, not stored (issue 42, migration 0029): every reader shows and filters by them as before, from the
answer until the consume moves the step and the run on."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import select, text

from models import history, run_start
from models.tables import Principal, Run, Step
from parkway.db import transaction
from tasks.sdk import Conflict, answer
from tests.integration.helpers import execute_ready, parked, step
from tests.support import ADMIN, AGENT, HUMAN, TARGET, Stack, interactions, new_response_id, run_row, start


def stored(run_id: str, step_id: str) -> tuple[str, str]:
    """The words stored for the run and the step, as the transitions wrote them."""
    with transaction() as session:
        run = session.scalar(text("SELECT status FROM runs WHERE id = :i"), {"i": run_id})
        step_ = session.scalar(text("SELECT status FROM steps WHERE id = :i"), {"i": step_id})
        return str(run), str(step_)


def listed(status: str) -> set[str]:
    """The runs the admin's list shows filtered by ``status`` (``GET /v1/runs?status=``)."""
    with transaction() as session:
        admin = session.scalar(select(Principal).where(Principal.name == ADMIN))
        assert admin is not None
        page = history.list_runs(session, admin, status=status, workflow=None, cursor=None, limit=500)
        return {line.run.id for line in page.items}


def test_derived_status__answered_reads_running_and_resuming_until_the_consume(stack: Stack) -> None:
    # Given a wait answered with no worker running: its continuation ready
    run_id, asked = parked("t.ask_one")
    sid = asked["go"].step_id
    assert (run_row(run_id).status, step(sid).status) == ("waiting", "parked")
    answer(asked["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)

    # Then the answer wrote neither the run nor the step: both keep the words their park stored
    assert stored(run_id, sid) == ("waiting", "parked")
    # And every reader shows them running and resuming: the ORM, its filters, a list's ?status=, a 409's state
    assert (run_row(run_id).status, step(sid).status) == ("running", "resuming")
    with transaction() as session:
        assert session.scalar(select(Run.id).where(Run.id == run_id, Run.status == "running")) == run_id
        assert session.scalar(select(Run.id).where(Run.id == run_id, Run.status == "waiting")) is None
        assert session.scalar(select(Step.id).where(Step.id == sid, Step.status == "resuming")) == sid
        assert session.scalar(select(Step.id).where(Step.id == sid, Step.status == "parked")) is None
    assert run_id in listed("running") and run_id not in listed("waiting")
    with pytest.raises(Conflict) as caught:
        answer(asked["go"].id, "no", response_id=new_response_id(), principal=HUMAN)
    assert caught.value.state is not None and caught.value.state["run_status"] == "running"

    # When its continuation is claimed and committed, then the run and the step are completed, as stored
    execute_ready(run_id)
    assert stored(run_id, sid) == ("completed", "completed")
    assert (run_row(run_id).status, step(sid).status) == ("completed", "completed")
    assert run_id in listed("completed") and run_id not in listed("running")


def test_derived_status__a_resumed_step_that_goes_on_stores_its_run_running(stack: Stack) -> None:
    # Given a wait answered whose continuation hands over to a next step
    run_id, asked = parked("t.ask_one", {"then": "t.after"})
    answer(asked["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)
    assert stored(run_id, asked["go"].step_id) == ("waiting", "parked")

    # When its continuation commits, then the resumed step is completed and the run stored running again
    execute_ready(run_id)
    assert stored(run_id, asked["go"].step_id) == ("running", "completed")
    assert run_row(run_id).status == "running"


def test_derived_status__the_clis_start_reports_a_resuming_run_running_on_a_reused_key(stack: Stack) -> None:
    # Given a run started with an idempotency key, parked, and answered with no worker running
    run_id = start("t.ask_one", {}, idempotency_key="derived-key")
    execute_ready(run_id)
    asked = interactions(run_id)
    answer(asked["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)
    # When `parkway run start` (plain psycopg, models/run_start.py) reuses the key for another request
    url = stack.database_url.replace("+psycopg", "")
    with psycopg.connect(url, autocommit=True) as conn, pytest.raises(Conflict) as caught:
        run_start.start(conn.execute, "t.ask_one", {"other": 1}, principal=AGENT, target=TARGET,
                        idempotency_key="derived-key")  # fmt: skip
    # Then its conflict names the run as every other reader shows it: running, not the word stored
    assert caught.value.state == {"run_id": run_id, "status": "running"}
