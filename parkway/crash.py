"""Named crash points: ``PARKWAY_CRASH_AT=<point>`` makes the process exit hard right there."""

from __future__ import annotations

import os
import sys

POINTS = frozenset(
    {
        "answer.after_commit",
        "publish.before_send",
        "resume.after_claim",
        "resume.before_commit",
        "resume.after_commit",
        "tool.after_intent",
        "tool.after_run",
        "sweep.mid_batch",
        "seal.mid_batch",
    }
)


def crash_point(name: str) -> None:
    """Exit with 137 (as a SIGKILL would) when the environment names this point; inert otherwise."""
    assert name in POINTS, f"unknown crash point {name}"
    if os.environ.get("PARKWAY_CRASH_AT") == name:
        sys.stderr.write(f"parkway: crash point {name} reached, exiting 137\n")
        sys.stderr.flush()
        os._exit(137)
