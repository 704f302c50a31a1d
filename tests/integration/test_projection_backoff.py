"""Projections that keep failing back off (issue 17 §7): each failed write pushes the run's next attempt out,
so with a small sweep batch a run whose projection cannot be written does not starve the newer ones; a
success clears the back-off."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from beat.sweep import run_sweep
from models import projections
from models.tables import Run
from parkway.db import transaction
from tasks import projection
from tests.integration.helpers import execute_ready
from tests.support import run_row, start


def _ended_unprojected(monkeypatch: pytest.MonkeyPatch, count: int) -> list[str]:
    """Runs that ended one after another, their projections left to the sweep (the projector thread off)."""
    import tasks.executor

    monkeypatch.setattr(tasks.executor, "project_soon", lambda record: None)
    run_ids = [start("t.after", {"n": n}) for n in range(count)]
    for run_id in run_ids:
        execute_ready(run_id)
    assert all(run_row(run_id).projection_pending for run_id in run_ids)
    return run_ids


def _block(run_id: str) -> Path:
    """A file where the run's workspace directory goes: its projection write fails with an OSError."""
    workspace = projection.metadata_path(run_id).parent
    workspace.parent.mkdir(parents=True, exist_ok=True)
    workspace.write_text("not a directory")
    return workspace


def test_sweep__a_projection_that_keeps_failing_does_not_starve_newer_runs(
    actors_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an older run whose projection cannot be written, and two newer ones
    # (a first back-off of a minute: no pass of this test comes after it)
    monkeypatch.setattr(projections, "BACKOFF_BASE_S", 60.0)
    failing, *newer = _ended_unprojected(monkeypatch, 3)
    blocked = _block(failing)

    # When the sweep runs with a batch of one, as many passes as there are runs
    for _ in range(3):
        run_sweep(batch=1)

    # Then the newer runs' projections were written meanwhile
    for run_id in newer:
        assert not run_row(run_id).projection_pending, "a failing projection starved a newer one"
        assert json.loads(projection.metadata_path(run_id).read_text())["status"] == "completed"
    # And the failing run was tried once, and waits out its back-off before the next attempt
    run = run_row(failing)
    assert run.projection_pending and run.projection_attempts == 1
    assert run.projection_next_at is not None and run.completed_at is not None
    assert run.projection_next_at > run.completed_at + timedelta(seconds=30)
    with transaction() as session:
        assert projections.pending_projections(session, batch=10) == []

    # When its workspace is writable again and its back-off has passed
    blocked.unlink()
    with transaction() as session:
        session.execute(update(Run).where(Run.id == failing).values(projection_next_at=Run.completed_at))
    report = run_sweep(batch=1)

    # Then it is written, and the success clears the back-off
    assert report.counts["projections"] == 1
    run = run_row(failing)
    assert not run.projection_pending and run.projection_attempts == 0 and run.projection_next_at is None
    assert json.loads(projection.metadata_path(failing).read_text())["status"] == "completed"


def test_projection_failure__each_pushes_the_next_attempt_further_and_a_stale_count_loses(
    actors_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a run whose projection cannot be written
    (run_id,) = _ended_unprojected(monkeypatch, 1)
    _block(run_id)
    # When it fails three times
    next_times = []
    for attempts in (1, 2, 3):
        assert not projection.project(run_id)
        run = run_row(run_id)
        assert run.projection_attempts == attempts and run.projection_next_at is not None
        next_times.append(run.projection_next_at)
    # Then each failure pushed the next attempt further out, the waits growing
    assert next_times[0] < next_times[1] < next_times[2]
    # And a failure counted from a stale read of the attempts changes nothing
    stale = run_row(run_id)
    stale.projection_attempts = 1
    with transaction() as session:
        assert projections.record_projection_failure(session, stale.id, stale.projection_attempts) is None
    assert run_row(run_id).projection_attempts == 3


def test_backoff__doubles_from_one_second_up_to_its_cap() -> None:
    waits = [projections.backoff_s(n) for n in range(1, 12)]
    assert waits[:4] == [1.0, 2.0, 4.0, 8.0]
    assert waits == sorted(waits) and max(waits) == projections.BACKOFF_CAP_S
    assert projections.backoff_s(10**6) == projections.BACKOFF_CAP_S
