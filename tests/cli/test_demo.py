"""``parkway demo`` (issue 7, item 5): the restart story with real processes exits 0 in under a minute,
every check held, on the embedded defaults in a temporary home (never the working directory's ./var)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.cli.support import embedded_env, stop

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


def test_demo__exits_0_in_under_a_minute_with_every_check_held(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "parkway.cli", "demo"],
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
    elapsed = time.monotonic() - started
    stdout = out.decode("utf-8", errors="replace")
    report = f"{stdout}\nstderr:\n{err.decode(errors='replace')[-3000:]}"

    assert proc.returncode == 0, report
    assert "every check held" in stdout, report
    assert "✗" not in stdout, report
    for check in CHECKS:
        assert f"✓  {check}" in stdout, f"missing check {check!r}\n{report}"
    # The run's event log is printed as a timeline, and the demo's own home is gone afterwards
    assert "event log: GET /v1/runs/" in stdout and "run.completed" in stdout
    assert "interaction.answered" in stdout and "toolcall.settled" in stdout
    assert elapsed < 60, f"the demo took {elapsed:.1f}s\n{report}"
    assert list(tmp_path.iterdir()) == [], "the demo must not write to the working directory (./var)"


def test_demo__constants_match_its_workflow_module() -> None:
    import parkway.demo as demo
    import parkway.demo_workflows as workflows

    assert (demo.TARGET, demo.EFFECTS_TABLE) == (workflows.TARGET, workflows.EFFECTS_TABLE)
    assert (demo.TOOL, demo.COMMITTED) == (workflows.TOOL, workflows.COMMITTED)
    assert demo.DEMO_SETTINGS["PARKWAY_IMPORTS"] == workflows.__name__
