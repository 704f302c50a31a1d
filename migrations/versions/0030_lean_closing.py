"""the answer's two functions made cheaper to run (issue 42: PostgreSQL's CPU per completion), the same rows
and events written

``parkway_close``: the run's liveness is read by its key (a scalar subquery: the planner cannot turn it into
a hashed scan of every live run, which the generic plan of 0027's ``EXISTS`` inside ``CASE`` was on a small
table); its one or two events are put together as text in the order ``json_agg`` gave them, without the
``UNION``, the count and the aggregate that built them (a plan node each to start at every call).

``parkway_answer`` refuses an ended run on the stored word, which the rule (0029) never changes for an ended
run, and reads the run's derived status (``parkway_run_status``, a function call and a query) only when it
returns the row it read: a refusal, or a closing that lost. The answer it writes returns the stored word (no
caller reads it).

``parkway_event_seqs(k)`` (0026) is one SQL expression: the planner puts it into each statement that calls it
(an argument used thrice must be cheap: every caller's is a count of a few cases, a constant or a column),
where the PL/pgSQL function cost a call, a context and three statements per batch; the same numbers, and the
same error past 65535 events (``parkway_event_overflow``, called only then).

Live: functions replaced, catalog changes that take no lock on any table: answers go on while it runs,
each call taking the function as it was when it started.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-07 18:20:00
"""

import runpy
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _replaced(function: str, *changes: tuple[str, str]) -> str:
    """``function`` with each change made exactly once."""
    for old, new in changes:
        assert function.count(old) == 1, old
        function = function.replace(old, new)
    return function


# Migration 0029's functions' text, which this one changes.
_0029 = SimpleNamespace(**runpy.run_path(str(Path(__file__).with_name("0029_derived_states.py"))))
_0026 = SimpleNamespace(**runpy.run_path(str(Path(__file__).with_name("0026_event_batches.py"))))

# The event of the closing, as 0027 builds it (``every``'s first part): kept verbatim.
_CLOSED_EVENT = _0029.CLOSE[_0029.CLOSE.index("json_build_object('type', 'interaction.'") :]
_CLOSED_EVENT = _CLOSED_EVENT[: _CLOSED_EVENT.index(" AS e\n")]

CLOSE = _replaced(
    _0029.CLOSE,
    (
        """ELSE EXISTS (SELECT 1 FROM runs AS r WHERE r.id = x.run_id
                                AND r.status NOT IN ('canceled', 'completed', 'failed', 'interrupted')) END""",
        """ELSE (SELECT r.status FROM runs AS r WHERE r.id = x.run_id)
                        NOT IN ('canceled', 'completed', 'failed', 'interrupted') END""",
    ),
    (
        _0029.CLOSE[_0029.CLOSE.index("    ), every AS (") : _0029.CLOSE.index("    )\n    SELECT c.id::varchar")],
        f"""    ), logged AS (
        -- json_agg's text of the one or two events: '[' e1 ', ' e2 ']'
        INSERT INTO event_batches (first_seq, run_id, at, trace_id, events)
        SELECT parkway_event_seqs(CASE WHEN d.run_id IS NULL THEN 1 ELSE 2 END), c.run_id, p_at, p_trace_id,
               ('[' || ({_CLOSED_EVENT})::text
                || CASE WHEN d.run_id IS NULL THEN '' ELSE ', ' || json_build_object('type', 'continuation.ready',
                       'data', json_build_object('run_id', d.run_id, 'continuation_id', p_cid, 'step_id', p_sid,
                                                 'name', d.name))::text END
                || ']')::json
        FROM shut AS c LEFT JOIN made AS d ON true
""",
    ),
)

_DERIVED = "run_status := parkway_run_status(run_id, run_status);  -- what the caller shows\n        RETURN NEXT;"
ANSWER = _replaced(
    _0029.ANSWER,
    ("x.quorum, x.level, parkway_run_status(r.id, r.status),", "x.quorum, x.level, r.status,"),
    (
        "OR NOT (vouch = ANY (p_vouched)) THEN\n        RETURN NEXT;",
        f"OR NOT (vouch = ANY (p_vouched)) THEN\n        {_DERIVED}",
    ),
    (
        "IF c.closed IS NULL THEN  -- not under this lock; read again by the caller\n        RETURN NEXT;",
        f"IF c.closed IS NULL THEN  -- not under this lock; read again by the caller\n        {_DERIVED}",
    ),
)


EVENT_OVERFLOW = """
CREATE FUNCTION parkway_event_overflow() RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'transaction % writes more than 65535 events', pg_current_xact_id()
        USING ERRCODE = 'program_limit_exceeded';
END
$$
"""

# 0026's numbering: the transaction's id << 16 | its next event number, k numbers taken (the count so far
# kept in the transaction's setting ``parkway.event_n``).
_TAKEN = "coalesce(nullif(current_setting('parkway.event_n', true), '')::integer, 0) + k"
EVENT_SEQS = f"""
CREATE OR REPLACE FUNCTION parkway_event_seqs(k integer) RETURNS bigint LANGUAGE sql VOLATILE AS $$
SELECT (pg_current_xact_id()::text::bigint << 16)
       | (CASE WHEN {_TAKEN} > 65535 THEN parkway_event_overflow()
               ELSE set_config('parkway.event_n', ({_TAKEN})::text, true)::integer END - k + 1)
$$
"""


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")  # none is taken on a table; should one be, never wait past 1 s
    for function in (EVENT_OVERFLOW, EVENT_SEQS, CLOSE, ANSWER):
        op.execute(function)


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")
    seqs = _0026.EVENT_SEQS.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    for function in (_0029.CLOSE, _0029.ANSWER, seqs, "DROP FUNCTION parkway_event_overflow()"):
        op.execute(function)
