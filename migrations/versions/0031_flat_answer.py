"""the answer as one function, its caller check without the team rules where none can apply (issue 42:
PostgreSQL's CPU per completion), the same rows and events written

``parkway_answer`` writes in one statement: every check the answer makes (the wait pending, not expired, no
quorum, its run not ended, the caller holding a place, the value vouched for) is a condition of the closing
itself, 0030's ``parkway_close`` statement as the answer needs it (the caller's name for the event, the
run's target for the remote-only rule, ``parkway_remote_only``'s expression). Only when it writes nothing
is the wait read, for the caller to say why (a refusal, a quorum's response, a value to validate and seal),
as 0030 returned it. The step's lock is taken in the statement that finds the caller (for a human or an
admin). An answer that writes runs two statements (the caller with the lock, the closing) where 0030 ran
five and four functions (the caller, the lock, the read with ``parkway_place_of`` and
``parkway_held_by_delegation``, the call of ``parkway_close``, its statement with ``parkway_remote_only``).
``parkway_close`` stays as it is for an expiry and the deciding response of a quorum. The price: a response
to a quorum wait tries the closing in vain before it is read (a value vouched for by none of the caller's
schemas, a sensitive one among them, is read at once).

The caller check: ``parkway_place_of``'s team and delegation rules decide only through the wait's rows in
``interaction_answerers`` (an assignee, an escalation level, a delegation). The closing (and the read after
one that wrote nothing) looks for one first; with none, the rule is what is left of it: a live grant on the
wait's target, unless its assignees alone may answer. A delegation, an assignee or a grant made after the
park is read there, at the answer, under the step's lock as before; any row sends the answer through
``parkway_place_of`` in full.

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


def _between(text: str, start: str, end: str) -> str:
    """The part of ``text`` from ``start`` up to ``end``."""
    return text[text.index(start) : text.index(end, text.index(start))]


# The remote-only rule (0027's function body), for the key and the run's target of the continuation made due.
_REMOTE_ONLY = _replaced(
    _between(_0027_REMOTE_ONLY, "NOT EXISTS", ";\nEND"),
    ("p_kind", "'resume'"),
    ("p_key", "m.continuation"),
    ("p_target", "m.run_target"),
)

# Where the caller holds a place on the wait ``x`` (NULL: none): through parkway_place_of when a row of
# interaction_answerers names someone for it; with none, that rule is its first clause alone.
_PLACE = """CASE WHEN EXISTS (SELECT 1 FROM interaction_answerers AS a WHERE a.interaction_id = x.id)
                THEN parkway_place_of(x.id, caller_id, false)
                WHEN CAST(x.team ->> 'assignees_only' AS boolean) IS NOT true
                     AND EXISTS (SELECT 1 FROM grants AS g WHERE g.principal_id = caller_id AND g.target = x.target
                                 AND g.revoked_at IS NULL)
                THEN caller_id END"""

# The answer's event (0030's, of an answer: no keys added by the caller) and the continuation's after it.
_EVENTS = _replaced(
    _between(_0030_CLOSE, "    ), logged AS (", "    )\n    SELECT c.id::varchar"),
    ("'interaction.' || p_status", "'interaction.' || c.status"),
    ("'status', p_status", "'status', c.status"),
    ("p_sid", "sid"),
    ("(SELECT p.name FROM principals AS p WHERE p.id = p_by)", "caller_name"),
    (
        "-- the caller's keys after these, in their order\n                  || CASE WHEN p_extra IS NULL"
        " OR p_extra::text = '{}' THEN '}' ELSE ', ' || substr(p_extra::text, 2)\n                     END",
        "|| '}'",
    ),
)
_EVENTS = re.sub(r"CASE WHEN expiry\n\s*THEN json_build_object\([^)]*\)\n\s*ELSE ", "", _EVENTS)
_EVENTS = _replaced(_EVENTS, ("|| '}')::json END))::text", "|| '}')::json))::text"))

# Every check of the answer and the closing in one statement, under the step's lock (taken by the statement
# before): the wait pending, not expired, no quorum, its run not ended, the caller holding a place, the value
# vouched for by its kind, schema and sensitive fields; the step made due when no other wait of it is
# pending (parked -> resuming is derived from the continuation, 0029).
_CLOSING = f"""
    WITH shut AS (
        UPDATE interactions AS x SET
            status = CASE WHEN x.kind = 'permission' AND (p_value ->> 'approved') IS DISTINCT FROM 'true'
                          THEN 'rejected' ELSE 'answered' END,
            value = p_value, secret = p_secret, response_id = p_rsp, response_digest = p_digest,
            answered_by_id = caller_id, answered_at = p_at, closed_at = p_at, answered_level = x.level
        FROM runs AS r
        WHERE x.id = p_iid AND x.step_id = sid AND x.status = 'pending' AND x.quorum <= 1
          AND (x.expires_at <= now()) IS NOT true AND r.id = x.run_id
          AND r.status NOT IN ('canceled', 'completed', 'failed', 'interrupted')
          AND parkway_vouch(x.kind, x.schema, x.sensitive) = ANY (p_vouched)
          AND {_PLACE} IS NOT NULL
        RETURNING x.id, x.run_id, x.key, x.kind, x.target, x.level, x.status, r.target AS run_target
    ), resuming AS (
        SELECT x.run_id, x.continuation, c.run_target FROM steps AS x JOIN shut AS c ON true
        WHERE x.id = sid AND x.status = 'parked'
          AND NOT EXISTS (SELECT 1 FROM interactions AS o
                          WHERE o.step_id = x.id AND o.status = 'pending' AND o.id <> p_iid)
    ), made AS (
        INSERT INTO continuations (id, run_id, step_id, kind, name, status, attempts, publishes, enqueued_at,
                                   created_at, remote, traceparent)
        SELECT p_cid, m.run_id, sid, 'resume', m.continuation, 'ready', 0, 1, now(), now(),
               {_REMOTE_ONLY},
               p_traceparent
        FROM resuming AS m
        RETURNING run_id, name, remote
{_EVENTS}    )
    SELECT c.id, c.status, d.run_id, d.name, d.remote INTO closed, decided, due_run_id, due_name, due_remote
    FROM shut AS c LEFT JOIN made AS d ON true;
"""

# The wait's step, locked in the statement that finds the caller when the caller may answer: answers,
# cancels and expiry of one step are serialized by that lock; the statements after it see what committed
# before it was granted.
_LOCKED = """LEFT JOIN interactions AS x ON x.id = p_iid
        LEFT JOIN LATERAL (SELECT s.id FROM steps AS s WHERE s.id = x.step_id AND p.kind IN ('human', 'admin')
                           FOR UPDATE) AS locked ON true"""

_READ = _between(_0030_ANSWER, "    SELECT x.id, x.run_id,", "    IF quorum > 1")
ANSWER = (
    _0030_ANSWER[: _0030_ANSWER.index("DECLARE\n")]
    + """DECLARE
    sid varchar;
    decided varchar;
    closed varchar;
BEGIN
    outcome := 'read';
"""
    + _replaced(
        _between(_0030_ANSWER, "    IF p_th IS NOT NULL THEN", "    SELECT x.id, x.run_id,"),
        ("(SELECT x.step_id FROM interactions AS x WHERE x.id = p_iid)", "x.step_id"),
        ("FROM principals AS p WHERE", f"FROM principals AS p {_LOCKED}\n        WHERE"),
        ("    PERFORM 1 FROM steps AS x WHERE x.id = sid FOR UPDATE;\n", ""),
    )
    + """    IF cardinality(p_vouched) > 0 THEN  -- else no value can be written: read for the caller to check it
"""
    + _CLOSING.replace("\n", "\n    ").rstrip(" ")
    + """        IF closed IS NOT NULL THEN
            outcome := decided;
            status := decided;
            step_id := sid;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    -- refused, or not written: the wait as it stands, for the caller to say why
"""
    + _replaced(_READ, ("parkway_place_of(x.id, caller_id, false),", f"{_PLACE},"))
    + """    run_status := parkway_run_status(run_id, run_status);  -- what the caller shows
    RETURN NEXT;
END
$$
"""
)


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")  # none is taken on a table; should one be, never wait past 1 s
    op.execute(ANSWER)


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")
    op.execute(_0030_ANSWER)
