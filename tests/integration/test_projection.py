"""The worker's projector thread: each ended run's ``run_metadata.json`` is written within a window of its
commit, and the flags of the runs written in one window are cleared in one transaction; a run whose file could
not be written keeps its flag for the sweep, without holding back the others."""

from __future__ import annotations

import json
from typing import Any

import pytest

from models import store
from tasks import projection
from tests.integration.helpers import execute_ready
from tests.support import run_row, start


def test_projector__clears_a_windows_flags_together_and_leaves_a_failed_write_to_the_sweep(
    actors_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a projector with nothing of earlier tests in hand, a window long enough to hold three runs
    # ending one after another, and the flag transactions counted
    projection.drain_projections()
    monkeypatch.setattr(projection, "_LINGER_S", 3.0)
    cleared: list[list[str]] = []
    original = store.clear_projections_pending

    def counting(session: Any, records: list[Any]) -> int:
        cleared.append([r.id for r in records])
        return original(session, records)

    monkeypatch.setattr(store, "clear_projections_pending", counting)
    run_ids = [start("t.after", {"n": n}) for n in range(3)]
    # ... and the middle run's file cannot be written (a directory stands where it goes)
    blocked = projection.metadata_path(run_ids[1])
    blocked.mkdir(parents=True)

    # When the three runs end through the worker path
    for run_id in run_ids:
        execute_ready(run_id)
    projection.drain_projections()

    # Then the two written runs' flags were cleared in one transaction, and their files hold the record
    assert cleared == [[run_ids[0], run_ids[2]]]
    for run_id in (run_ids[0], run_ids[2]):
        run = run_row(run_id)
        assert run.status == "completed" and not run.projection_pending
        written = json.loads(projection.metadata_path(run_id).read_text())
        assert written["status"] == "completed" and written["execution_id"] == run.finished_by

    # And the blocked run is still pending, with no temp file left beside it, until a projection pass writes it
    assert run_row(run_ids[1]).projection_pending
    assert [p.name for p in blocked.parent.iterdir()] == ["run_metadata.json"]
    blocked.rmdir()
    assert projection.project(run_ids[1])
    assert not run_row(run_ids[1]).projection_pending
    assert json.loads(blocked.read_text())["status"] == "completed"


def test_clearing_flags__each_run_only_while_its_record_is_the_one_projected(
    actors_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given three ended runs whose projections nobody has written yet
    import tasks.executor
    from parkway.db import transaction

    monkeypatch.setattr(tasks.executor, "project_soon", lambda record: None)
    run_ids = [start("t.after", {"n": n}) for n in range(3)]
    for run_id in run_ids:
        execute_ready(run_id)
    runs = [run_row(run_id) for run_id in run_ids]
    assert all(run.projection_pending for run in runs)

    # When their flags are cleared together, the last one from a record it no longer has (another execution's)
    stale = runs[2]
    stale.finished_by = "another-execution"
    with transaction() as session:
        cleared = store.clear_projections_pending(session, runs)

    # Then only the two runs whose record was projected are cleared
    assert cleared == 2
    assert [run_row(run_id).projection_pending for run_id in run_ids] == [False, False, True]
