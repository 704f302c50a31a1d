"""the answer as one function, its caller check without the team rules where none can apply (issue 42:
PostgreSQL's CPU per completion), the same rows and events written

``parkway_answer`` runs the closing itself: ``parkway_close``'s statement (0030), written into it with what
the answer already holds (the step, the decided status, the caller's id and name, the run's target) in
place of the arguments and reads it took, and the remote-only rule (``parkway_remote_only``) as an
expression of that statement. One function layer and three statements fewer per answer; ``parkway_close``
stays as it is for an expiry and the deciding response of a quorum.

The caller check: ``parkway_place_of``'s team and delegation rules decide only through the wait's rows in
``interaction_answerers`` (an assignee, an escalation level, a delegation). The read under the step's lock
looks for one first; with none, the rule is what is left of it: a live grant on the wait's target, unless
its assignees alone may answer. A delegation, an assignee or a grant made after the park is read there, at
the answer, under the same lock as before; any row sends the answer through ``parkway_place_of`` in full.

Live: one function replaced (a catalog change; no table is locked). An answer in flight finishes with the
function it started with, the next one takes the new one.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-07 21:00:00
"""

import re
from collections.abc import Sequence
from pathlib import Path
from runpy import run_path

from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_HERE = Path(__file__).parent
_0030_CLOSE, _0030_ANSWER = (run_path(str(_HERE / "0030_lean_closing.py"))[name] for name in ("CLOSE", "ANSWER"))
_0027_REMOTE_ONLY = run_path(str(_HERE / "0027_answer_function.py"))["REMOTE_ONLY"]


def _replaced(text: str, *changes: tuple[str, str]) -> str:
    """``text`` with each change made: every occurrence, of which there must be at least one."""
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    return text


# The remote-only rule (0027's function body), for the key and target of the continuation the closing makes.
_REMOTE_ONLY = _0027_REMOTE_ONLY[
    _0027_REMOTE_ONLY.index("RETURN ") + len("RETURN ") : _0027_REMOTE_ONLY.index(";\nEND")
]
_REMOTE_ONLY = _replaced(_REMOTE_ONLY, ("p_kind", "'resume'"), ("p_key", "m.continuation"), ("p_target", "run_target"))

# 0030's closing statement, with the answer's variables for parkway_close's arguments (an answer is no expiry
# and adds no keys to its event), and its one row put into the answer's variables.
_STATEMENT = _0030_CLOSE[_0030_CLOSE.index("    WITH shut AS (") : _0030_CLOSE.index(";\nEND\n$$")]
_CLOSING = _replaced(
    re.sub(r"CASE WHEN expiry THEN [^\n]*? ELSE ([^\n]*?) END", r"\1", _STATEMENT),  # the interaction's columns
    ("p_sid", "sid"),
    ("p_status", "decided"),
    ("CASE WHEN expiry", "CASE WHEN false"),
    ("(SELECT p.name FROM principals AS p WHERE p.id = p_by)", "caller_name"),
    ("p_by", "caller_id"),
    (
        "-- the caller's keys after these, in their order\n                  || CASE WHEN p_extra IS NULL"
        " OR p_extra::text = '{}' THEN '}' ELSE ', ' || substr(p_extra::text, 2)\n                     END",
        "|| '}'",
    ),
    (
        "parkway_remote_only('resume', m.continuation, (SELECT r.target FROM runs AS r WHERE r.id = m.run_id))",
        f"({_REMOTE_ONLY})",
    ),
    (
        "SELECT c.id::varchar, d.run_id::varchar, d.name::varchar, d.remote FROM",
        "SELECT c.id, d.run_id, d.name, d.remote INTO closed, due_run_id, due_name, due_remote FROM",
    ),
)

# Whom a wait's rows of interaction_answerers name: with none, parkway_place_of is its first clause alone.
_PLACE = """CASE WHEN EXISTS (SELECT 1 FROM interaction_answerers AS a WHERE a.interaction_id = x.id)
                THEN parkway_place_of(x.id, caller_id, false)
                WHEN CAST(x.team ->> 'assignees_only' AS boolean) IS NOT true
                     AND EXISTS (SELECT 1 FROM grants AS g WHERE g.principal_id = caller_id AND g.target = x.target
                                 AND g.revoked_at IS NULL)
                THEN caller_id END"""

_CLOSE_CALL = _0030_ANSWER[
    _0030_ANSWER.index("    SELECT * INTO c FROM parkway_close(") : _0030_ANSWER.index("    IF c.closed IS NULL THEN")
]
ANSWER = _replaced(
    _0030_ANSWER,
    ("    c record;\n", "    closed varchar;\n    run_target varchar;\n"),
    ("x.quorum, x.level, r.status,", "x.quorum, x.level, r.status, r.target,"),
    ("parkway_place_of(x.id, caller_id, false),", f"{_PLACE},"),
    (
        "response_digest, answered_by_id, answered_at, quorum, level, run_status,",
        "response_digest, answered_by_id, answered_at, quorum, level, run_status, run_target,",
    ),
    (_CLOSE_CALL, _CLOSING + ";\n"),
    ("IF c.closed IS NULL THEN", "IF closed IS NULL THEN"),
    ("    due_run_id := c.due_run_id;\n    due_name := c.due_name;\n    due_remote := c.due_remote;\n", ""),
)
assert re.search(r"\bc\.(closed|due_)", ANSWER) is None


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")  # none is taken on a table; should one be, never wait past 1 s
    op.execute(ANSWER)


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")
    op.execute(_0030_ANSWER)
