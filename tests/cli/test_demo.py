"""``parkway demo`` (issue 7, item 5): the restart story with real processes exits 0 with every check held,
on the embedded defaults in a temporary home (never the working directory's ./var), and its database holds
what it printed: no timing is asserted, only the outcome."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from sqlalchemy import text

from parkway import embedded
from tests.cli.support import embedded_env, home_database, stop

CHECKS = [
    "stack up: api answers /healthz, worker and beat ready",
    "run parked on a permission and a question",
    "worker and api killed while the run waits",
    "same questions pending after the restart (same ids, over HTTP)",
    "both answers accepted over HTTP",
    "resuming worker died at resume.before_commit",
    "the crashed attempt committed nothing",
    "run completed after the restart",
    "continuation committed exactly once (2 executions, 1 commit)",
    "effect count exactly 1",
    "the replay='never' tool ran exactly once",
]


def test_demo__exits_0_with_every_check_held_and_its_database_agrees(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "parkway.cli", "demo", "--keep"],
        cwd=tmp_path,
        env=embedded_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=150)
    finally:
        stop(proc, [])
    stdout = out.decode("utf-8", errors="replace")
    report = f"{stdout}\nstderr:\n{err.decode(errors='replace')[-3000:]}"
    kept = re.search(r"^logs and database kept in (.+)$", stdout, re.MULTILINE)
    home = Path(kept.group(1)) if kept else None
    try:
        assert proc.returncode == 0, report
        assert "every check held" in stdout, report
        assert "✗" not in stdout, report
        for check in CHECKS:
            assert f"✓  {check}" in stdout, f"missing check {check!r}\n{report}"
        # The run's event log is printed as a timeline, and nothing is written to the working directory
        assert "event log: GET /v1/runs/" in stdout and "run.completed" in stdout
        assert "interaction.answered" in stdout and "toolcall.settled" in stdout
        assert list(tmp_path.iterdir()) == [], "the demo must not write to the working directory (./var)"
        # And its own database (kept with --keep) holds what the demo says of itself
        assert home is not None, report
        assert embedded.postmaster(embedded.data_dir(home)) is None, "the demo stops the PostgreSQL it started"
        _database_agrees(home)
    finally:
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)


def _database_agrees(home: Path) -> None:
    """One run, completed by one commit of its resumed continuation after two executions; both answers
    from the human; the committed effect once and the replay='never' tool once."""
    import parkway.demo as demo

    with home_database(home) as db:

        def rows(sql: str, **params: object) -> list[tuple[object, ...]]:
            return [tuple(row) for row in db.execute(text(sql), params)]

        runs = rows("SELECT id, status, result, completed_at, finished_by FROM runs")
        assert len(runs) == 1, runs
        run_id, status, result, completed_at, finished_by = runs[0]
        result = json.loads(result) if isinstance(result, str) else result
        assert status == "completed" and completed_at is not None and finished_by is not None
        assert isinstance(result, dict) and result["deployed"] is True and result["window"] == "now", result
        assert rows("SELECT status FROM steps WHERE run_id = :r", r=run_id) == [("completed",)]
        answered = rows(
            "SELECT i.kind, i.status, p.name FROM interactions i JOIN principals p ON p.id = i.answered_by_id "
            "WHERE i.run_id = :r ORDER BY i.kind",
            r=run_id,
        )
        assert answered == [("permission", "answered", demo.HUMAN), ("question", "answered", demo.HUMAN)]
        continuations = rows(
            "SELECT kind, name, status, attempts FROM continuations WHERE run_id = :r ORDER BY created_at", r=run_id
        )
        assert all(c[2] == "consumed" for c in continuations), continuations
        assert [c[3] for c in continuations if str(c[1]).startswith("demo.decide")] == [2], continuations
        counted = f"SELECT kind, COUNT(*) FROM {demo.EFFECTS_TABLE} WHERE run_id = :r GROUP BY kind"
        effects = dict(rows(counted, r=run_id))
        assert effects == {demo.COMMITTED: 1, demo.TOOL: 1}, effects
        types = [t for (t,) in rows("SELECT type FROM events WHERE run_id = :r ORDER BY seq", r=run_id)]
        assert types.count("run.completed") == 1 and types[-1] == "run.completed", types
        assert types.count("interaction.answered") == 2, types


def test_demo__constants_match_its_workflow_module() -> None:
    import parkway.demo as demo
    import parkway.demo_workflows as workflows

    assert (demo.TARGET, demo.EFFECTS_TABLE) == (workflows.TARGET, workflows.EFFECTS_TABLE)
    assert (demo.TOOL, demo.COMMITTED) == (workflows.TOOL, workflows.COMMITTED)
    assert demo.DEMO_SETTINGS["PARKWAY_IMPORTS"] == workflows.__name__
