"""The worker's projector thread and the projection cursor (issue 42): each ended run's ``run_metadata.json``
is written within a window of its commit and no row is written for it; one pass moves the cursor past the
whole window (one row write); a run whose file could not be written has its failure recorded for the sweep,
without holding back the others; the cursor never passes a run a transaction still open could end."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import text

from models import projections
from parkway.db import get_engine
from tasks import projection
from tests.integration.helpers import execute_ready
from tests.support import run_row, start, wait_for


def test_projector__a_window_moves_the_cursor_once_and_records_only_a_failed_write(
    actors_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a projector with nothing of earlier tests in hand, a window long enough to hold three runs
    # ending one after another, and the cursor's moves counted
    projection.drain_projections()
    monkeypatch.setattr(projection, "_LINGER_S", 3.0)
    moves = _count_moves(monkeypatch)
    run_ids = [start("t.after", {"n": n}) for n in range(3)]
    # ... and the middle run's file cannot be written (a directory stands where it goes)
    blocked = projection.metadata_path(run_ids[1])
    blocked.mkdir(parents=True)

    # When the three runs end through the worker path
    for run_id in run_ids:
        execute_ready(run_id)
    projection.drain_projections()

    # Then the cursor moved once, past the three; the two written runs agree with no failure recorded
    assert len(moves) == 1
    for run_id in (run_ids[0], run_ids[2]):
        run = run_row(run_id)
        assert run.status == "completed" and not run.projection_pending
        assert not run.projection_failed and run.projection_attempts == 0
        written = json.loads(projection.metadata_path(run_id).read_text())
        assert written["status"] == "completed" and written["execution_id"] == run.finished_by

    # And the blocked run is still pending, its failure recorded, with no temp file left beside it, until a
    # projection pass writes it
    failed = run_row(run_ids[1])
    assert failed.projection_pending and failed.projection_failed and failed.projection_attempts == 1
    assert [p.name for p in blocked.parent.iterdir()] == ["run_metadata.json"]
    blocked.rmdir()
    assert projection.project(run_ids[1])
    assert not run_row(run_ids[1]).projection_pending
    assert json.loads(blocked.read_text())["status"] == "completed"


def test_cursor__never_passes_a_run_while_an_older_transaction_is_open(
    actors_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a transaction that has written (it holds a transaction id) and is still open
    import tasks.executor

    monkeypatch.setattr(tasks.executor, "project_soon", lambda record: None)  # the passes are the test's
    older = get_engine().connect()
    try:
        older.execute(text("SELECT pg_current_xact_id()"))
        # ... and two runs that ended after it began, their files not written
        run_ids = [start("t.after", {"n": n}) for n in range(2)]
        for run_id in run_ids:
            execute_ready(run_id)

        # When a pass runs while it is open
        projection.catch_up()

        # Then the runs are pending still: the cursor stays below what that transaction could yet write
        assert all(run_row(run_id).projection_pending for run_id in run_ids)
        assert not any(projection.metadata_path(run_id).exists() for run_id in run_ids)
    finally:
        older.rollback()
        older.close()

    # When the next pass runs after it ended, then it writes both files together, once, and covers both runs
    writes: list[int] = []
    original = projection.write_all

    def counting(files: list[Any]) -> list[Any]:
        writes.append(len(files))
        return original(files)

    monkeypatch.setattr(projection, "write_all", counting)
    assert projection.catch_up() == 2
    assert writes == [2]
    for run_id in run_ids:
        run = run_row(run_id)
        assert not run.projection_pending and not run.projection_failed
        assert json.loads(projection.metadata_path(run_id).read_text())["execution_id"] == run.finished_by


def test_cursor__a_pass_beside_another_takes_nothing(actors_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a run ended with its file not written, and another pass in progress (it holds the pass's lock)
    import tasks.executor

    monkeypatch.setattr(tasks.executor, "project_soon", lambda record: None)  # the passes are the test's
    run_id = start("t.after", {"n": 0})
    execute_ready(run_id)
    other = get_engine().connect()
    try:
        other.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": projections.PASS_LOCK})

        # When a pass runs beside it, then it takes nothing: no file written, the run still pending
        assert projection.catch_up() == 0
        assert not projection.metadata_path(run_id).exists() and run_row(run_id).projection_pending
    finally:
        other.rollback()
        other.close()

    # And once the other pass has ended, the next one writes it
    assert projection.catch_up() == 1
    assert not run_row(run_id).projection_pending


def _count_moves(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    moves: list[tuple[int, int]] = []
    original = projections.advance_cursor

    def counting(session: Any, was: int, to: int) -> bool:
        moved = original(session, was, to)
        if moved:
            moves.append((was, to))
        return moved

    monkeypatch.setattr(projections, "advance_cursor", counting)
    return moves


def test_projector__windows_within_a_pass_interval_share_one_pass(
    actors_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given short windows, a pass interval far longer than the test, and a pass just run (a drain runs the one owed)
    monkeypatch.setattr(projection, "_LINGER_S", 0.05)
    monkeypatch.setattr(projection, "PASS_EVERY_S", 60.0)
    first = start("t.after", {"n": 0})
    execute_ready(first)
    projection.drain_projections()
    assert not run_row(first).projection_pending
    moves = _count_moves(monkeypatch)

    # When two more runs end, each in a window of its own
    run_ids = [start("t.after", {"n": n}) for n in (1, 2)]
    for run_id in run_ids:
        execute_ready(run_id)
        wait_for(projection.metadata_path(run_id).exists, what="the run's file written in its window")

    # Then their files are written and no pass has run yet: the pass interval has not passed
    assert moves == [] and all(run_row(run_id).projection_pending for run_id in run_ids)

    # And the pass owed, run when asked (a drain), covers both at once
    projection.drain_projections()
    assert len(moves) == 1
    assert not any(run_row(run_id).projection_pending for run_id in run_ids)


def test_projector__the_pass_owed_runs_unasked_once_its_interval_has_passed(
    actors_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given short windows and a short pass interval
    monkeypatch.setattr(projection, "_LINGER_S", 0.05)
    monkeypatch.setattr(projection, "PASS_EVERY_S", 0.5)
    projection.drain_projections()

    # When runs end in windows of their own, the last with nothing after it
    run_ids = [start("t.after", {"n": n}) for n in range(3)]
    for run_id in run_ids:
        execute_ready(run_id)
        wait_for(projection.metadata_path(run_id).exists, what="the run's file written in its window")

    # Then the cursor passes them all without a drain or a sweep
    for run_id in run_ids:
        wait_for(lambda run_id=run_id: not run_row(run_id).projection_pending, what="the cursor past the run")
