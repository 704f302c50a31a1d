"""Crash points: inert unless PARKWAY_CRASH_AT names them; then the process exits 137 there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from parkway.crash import POINTS, crash_point

ROOT = Path(__file__).resolve().parents[2]
PROBE = "from parkway.crash import crash_point; crash_point({point!r}); print('still alive')"


def _probe(point: str, crash_at: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PARKWAY_CRASH_AT"}
    env["PYTHONPATH"] = str(ROOT)
    if crash_at is not None:
        env["PARKWAY_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-c", PROBE.format(point=point)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_crash_points__are_the_contract_names() -> None:
    assert {
        "answer.after_commit",
        "publish.before_send",
        "resume.after_claim",
        "resume.before_commit",
        "resume.after_commit",
        "tool.after_intent",
        "tool.after_run",
        "sweep.mid_batch",
    } <= POINTS


@pytest.mark.parametrize("point", sorted(POINTS))
def test_crash_point__inert_without_the_env_var(point: str) -> None:
    assert "PARKWAY_CRASH_AT" not in os.environ
    assert crash_point(point) is None


def test_crash_point__unknown_name_asserts() -> None:
    with pytest.raises(AssertionError, match=r"no\.such\.point"):
        crash_point("no.such.point")


def test_crash_point__exits_137_at_the_named_point() -> None:
    done = _probe("resume.after_claim", "resume.after_claim")
    assert done.returncode == 137, done.stderr
    assert "still alive" not in done.stdout
    assert "resume.after_claim" in done.stderr


def test_crash_point__other_points_stay_inert_in_a_crashing_process() -> None:
    done = _probe("resume.after_claim", "resume.before_commit")
    assert done.returncode == 0, done.stderr
    assert "still alive" in done.stdout


def test_crash_point__inert_without_the_env_var_in_a_fresh_process() -> None:
    done = _probe("answer.after_commit", None)
    assert done.returncode == 0, done.stderr
    assert "still alive" in done.stdout
