"""a run's ``waiting -> running`` and a step's ``parked -> resuming`` derived, not written (issue 42: two row
writes fewer per completion)

A parked step whose resume continuation is ready or claimed IS resuming; a waiting run with such a step IS
running. ``parkway_step_status`` and ``parkway_run_status`` are that rule, the one definition: every read
that shows or filters by a step's or a run's status goes through them (the ORM's ``Step.status`` and
``Run.status``, the claim's and a lease's ``run_status``, an interaction's ``run_status``, the answer's own
function). They are PL/pgSQL, so each session keeps their plans; a step or run not parked or waiting is
read without a query. ``parked`` and ``waiting`` stay stored while the continuation is due; the consume
writes what follows (the step's end, the run's end, or the run ``running`` again for the resumed step's
next step).

``parkway_close`` no longer updates the step and the run when it makes the continuation due: it reads the
parked step and inserts the ready continuation, its events as before (``interaction.<status>``,
``continuation.ready``). The unique (step_id, kind) of continuations still refuses a second resume of a wait.

Rows written before (a step ``resuming``, its run ``running``) read as they are: the rule changes only what
``parked`` and ``waiting`` read as, and every transition that leaves ``resuming`` still accepts it.

Live: functions only (new ones, and two replaced), catalog changes that take no lock on any table. The
downgrade stores the derived words first (the due steps and their runs, a few rows), so the functions of
0027 read them as they read here. Workers of an earlier release find a resumed step only as ``resuming``:
one that commits a ``Next`` or a ``Park`` of a step resumed after this upgrade would leave that step parked
(a run's end is unaffected). And this release reads through the new functions. So the workers of the
earlier release stop before the upgrade and this release's start after it: waits stay parked meanwhile,
answers go on, and their continuations are claimed once the new workers run.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-07 15:40:00
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STEP_STATUS = """
CREATE FUNCTION parkway_step_status(p_id varchar, p_status varchar) RETURNS varchar
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_status = 'parked' AND EXISTS (SELECT 1 FROM continuations AS c
                                       WHERE c.step_id = p_id AND c.kind = 'resume'
                                         AND c.status IN ('ready', 'claimed')) THEN
        RETURN 'resuming';
    END IF;
    RETURN p_status;
END
$$
"""

RUN_STATUS = """
CREATE FUNCTION parkway_run_status(p_id varchar, p_status varchar) RETURNS varchar
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_status = 'waiting' AND EXISTS (SELECT 1 FROM steps AS s
                                        WHERE s.run_id = p_id AND s.status = 'parked'
                                          AND parkway_step_status(s.id, s.status) = 'resuming') THEN
        RETURN 'running';
    END IF;
    RETURN p_status;
END
$$
"""


def _revision_0027() -> Any:
    """Migration 0027's module: its functions' text, which this one changes in a few lines."""
    spec = importlib.util.spec_from_file_location("_0027", Path(__file__).with_name("0027_answer_function.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _replaced(function: str, *changes: tuple[str, str]) -> str:
    """``function`` (0027's ``CREATE FUNCTION`` text) as a ``CREATE OR REPLACE``, each change made exactly once."""
    for old, new in (("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"), *changes):
        assert function.count(old) == 1, old
        function = function.replace(old, new)
    return function


_0027 = _revision_0027()
# 0027's, but the step and its run are read, not written, when the continuation is made due
CLOSE = _replaced(
    _0027.CLOSE,
    (
        "UPDATE steps AS x SET status = 'resuming', updated_at = p_at\n",
        "SELECT x.run_id, x.continuation FROM steps AS x\n",
    ),
    ("        RETURNING x.run_id, x.continuation\n", ""),
    (
        """    ), resumed AS (
        UPDATE runs AS r SET status = 'running', updated_at = p_at
        WHERE r.id = (SELECT m.run_id FROM resuming AS m) AND r.status = 'waiting'
""",
        "",
    ),
)
# 0027's, the run's status read through the rule
ANSWER = _replaced(
    _0027.ANSWER, ("x.quorum, x.level, r.status,", "x.quorum, x.level, parkway_run_status(r.id, r.status),")
)

# The functions' signatures, to drop them.
_STEP_STATUS, _RUN_STATUS = "parkway_step_status(varchar, varchar)", "parkway_run_status(varchar, varchar)"


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")  # none is taken on a table; should one be, never wait past 1 s
    op.execute(STEP_STATUS)
    op.execute(RUN_STATUS)
    op.execute(CLOSE)
    op.execute(ANSWER)


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")
    # What 0027 writes and reads: the derived words stored, the runs first (their rule reads the steps)
    for table, stored, derived, rule in (("runs", "waiting", "running", "parkway_run_status"),
                                         ("steps", "parked", "resuming", "parkway_step_status")):  # fmt: skip
        op.execute(f"UPDATE {table} SET status = '{derived}'"
                   f" WHERE status = '{stored}' AND {rule}(id, status) = '{derived}'")  # fmt: skip
    for function in (_0027.CLOSE, _0027.ANSWER):
        op.execute(_replaced(function))
    op.execute(f"DROP FUNCTION {_RUN_STATUS}")
    op.execute(f"DROP FUNCTION {_STEP_STATUS}")
