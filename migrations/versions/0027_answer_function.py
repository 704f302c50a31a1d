"""the answer as one server-side function (issue 42 item 2): ``parkway_answer`` finds the caller, locks the
step, reads the wait afresh and closes it (``parkway_close``) in one call, one round trip

``parkway_close`` is the one closing transition (an answer, the deciding response of a quorum, an expiry):
the CAS on the pending interaction, the step made due when it was the last one pending (parked ->
resuming, its run waiting -> running, a ready continuation) and their events in one batch, one statement.
It runs under the step's lock, which its caller took in an earlier statement: its snapshot, taken after,
shows every closing of the step committed before that lock was granted.

``parkway_answer`` writes only when the caller's process vouched for the value: ``p_vouched`` holds the
digests (``parkway_vouch``: kind, schema, sensitive fields) of the schemas the value passed; for any
other wait it returns what was read, the caller validates, seals and calls again (models/store/answering.py).

``parkway_place_of`` (who holds which place, docs/teams.md; ``parkway_held_by_delegation`` its part that a
delegation decides) and ``parkway_remote_only`` (work only remote workers serve) are the rules these need,
as functions; the reads and the sweep call the same ones. All keep generic plans: PL/pgSQL would otherwise
plan the closing's statement again at each call.

Live: functions only, catalog changes that take no lock on any table: answers go on while it runs.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07 13:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The place ``p_pid`` holds on the interaction by delegation: the first of the places moved to it whose move
# still stands (its place has not moved on since); NULL for none.
HELD_BY_DELEGATION = """
CREATE FUNCTION parkway_held_by_delegation(p_iid varchar, p_pid varchar) RETURNS varchar
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
BEGIN
RETURN (SELECT moved.place_id FROM interaction_answerers AS moved
        WHERE moved.interaction_id = p_iid AND moved.principal_id = p_pid AND moved.place_id IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM interaction_answerers AS later
                          WHERE later.interaction_id = moved.interaction_id AND later.place_id = moved.place_id
                            AND later.id > moved.id)
        ORDER BY moved.id LIMIT 1);
END
$$
"""

PLACE_OF = """
CREATE FUNCTION parkway_place_of(p_iid varchar, p_pid varchar, p_every_level boolean) RETURNS varchar
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
BEGIN
RETURN coalesce(
    parkway_held_by_delegation(p_iid, p_pid),
    (SELECT p_pid FROM interactions AS i
     WHERE i.id = p_iid
       AND ((EXISTS (SELECT 1 FROM grants AS g
                     WHERE g.principal_id = p_pid AND g.target = i.target AND g.revoked_at IS NULL)
             AND CAST(i.team ->> 'assignees_only' AS boolean) IS NOT true)
            OR EXISTS (SELECT 1 FROM interaction_answerers AS named
                       WHERE named.interaction_id = i.id AND named.source != 'delegate'
                         AND (p_every_level OR named.level <= i.level)
                         AND (named.principal_id = p_pid
                              OR named.target IS NOT NULL
                                 AND EXISTS (SELECT 1 FROM grants AS g
                                             WHERE g.principal_id = p_pid AND g.target = named.target
                                               AND g.revoked_at IS NULL))))
       AND NOT EXISTS (SELECT 1 FROM interaction_answerers AS given
                       WHERE given.interaction_id = i.id AND given.place_id = p_pid)));
END
$$
"""

REMOTE_ONLY = """
CREATE FUNCTION parkway_remote_only(p_kind varchar, p_key varchar, p_target varchar) RETURNS boolean
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
BEGIN
RETURN NOT EXISTS (SELECT 1 FROM workers AS w
                   WHERE w.expires_at > now() AND NOT w.remote
                     AND p_key = ANY (CASE WHEN p_kind = 'start' THEN w.steps ELSE w.continuations END))
   AND EXISTS (SELECT 1 FROM workers AS w
               WHERE w.expires_at > now() AND w.remote
                 AND p_key = ANY (CASE WHEN p_kind = 'start' THEN w.steps ELSE w.continuations END)
                 AND (EXISTS (SELECT 1 FROM principals AS p
                              WHERE p.id = w.principal_id AND p.kind = 'admin' AND p.disabled_at IS NULL)
                      OR EXISTS (SELECT 1 FROM grants AS g
                                 WHERE g.principal_id = w.principal_id AND g.target = p_target
                                   AND g.revoked_at IS NULL)));
END
$$
"""

VOUCH = """
CREATE FUNCTION parkway_vouch(p_kind varchar, p_schema json, p_sensitive json) RETURNS varchar
LANGUAGE sql IMMUTABLE AS $$
SELECT md5(p_kind || ':' || coalesce(p_schema::text, 'null') || ':' || coalesce(p_sensitive::text, 'null'))
$$
"""

# One statement, as the Core one it replaces was: it starts after the caller took the step's lock, so its
# snapshot shows every closing of the step committed before; the closing's own update is not visible to the
# other parts of the statement (hence ``o.id <> p_iid``).
CLOSE = """
CREATE FUNCTION parkway_close(
    p_iid varchar, p_sid varchar, p_status varchar, p_value json, p_secret varchar, p_rsp varchar,
    p_digest varchar, p_by varchar, p_at timestamptz, p_cid varchar, p_extra json, p_trace_id varchar,
    p_traceparent varchar
) RETURNS TABLE (closed varchar, due_run_id varchar, due_name varchar, due_remote boolean)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    expiry boolean := p_status = 'expired';
BEGIN
    RETURN QUERY
    WITH shut AS (
        UPDATE interactions AS x SET status = p_status,
            value = CASE WHEN expiry THEN x.value ELSE p_value END,
            secret = CASE WHEN expiry THEN x.secret ELSE p_secret END,
            response_id = CASE WHEN expiry THEN x.response_id ELSE p_rsp END,
            response_digest = CASE WHEN expiry THEN x.response_digest ELSE p_digest END,
            answered_by_id = CASE WHEN expiry THEN x.answered_by_id ELSE p_by END,
            answered_at = CASE WHEN expiry THEN x.answered_at ELSE p_at END,
            closed_at = CASE WHEN expiry THEN now() ELSE p_at END,
            answered_level = CASE WHEN expiry THEN x.answered_level ELSE x.level END
        WHERE x.id = p_iid AND x.step_id = p_sid AND x.status = 'pending'
          AND CASE WHEN expiry THEN x.expires_at <= now()
                   ELSE EXISTS (SELECT 1 FROM runs AS r WHERE r.id = x.run_id
                                AND r.status NOT IN ('canceled', 'completed', 'failed', 'interrupted')) END
        RETURNING x.id, x.run_id, x.key, x.kind, x.target, x.level
    ), resuming AS (
        UPDATE steps AS x SET status = 'resuming', updated_at = p_at
        WHERE x.id = p_sid AND x.status = 'parked' AND EXISTS (SELECT 1 FROM shut)
          AND NOT EXISTS (SELECT 1 FROM interactions AS o
                          WHERE o.step_id = x.id AND o.status = 'pending' AND o.id <> p_iid)
        RETURNING x.run_id, x.continuation
    ), resumed AS (
        UPDATE runs AS r SET status = 'running', updated_at = p_at
        WHERE r.id = (SELECT m.run_id FROM resuming AS m) AND r.status = 'waiting'
    ), made AS (
        INSERT INTO continuations (id, run_id, step_id, kind, name, status, attempts, publishes, enqueued_at,
                                   created_at, remote, traceparent)
        SELECT p_cid, m.run_id, p_sid, 'resume', m.continuation, 'ready', 0, 1, now(), now(),
               parkway_remote_only('resume', m.continuation, (SELECT r.target FROM runs AS r WHERE r.id = m.run_id)),
               p_traceparent
        FROM resuming AS m
        RETURNING run_id, name, remote
    ), every AS (
        SELECT 0 AS n, json_build_object('type', 'interaction.' || p_status, 'data', CASE WHEN expiry
            THEN json_build_object('run_id', c.run_id, 'interaction_id', c.id, 'step_id', p_sid, 'key', c.key,
                                   'kind', c.kind, 'target', c.target, 'status', p_status)
            ELSE (left(json_build_object('run_id', c.run_id, 'interaction_id', c.id, 'step_id', p_sid,
                                         'key', c.key, 'kind', c.kind, 'target', c.target, 'status', p_status,
                                         'answered_by', (SELECT p.name FROM principals AS p WHERE p.id = p_by)
                                        )::text, -1)
                  || CASE WHEN c.level <> 0 THEN ', "level" : ' || c.level ELSE '' END
                  -- the caller's keys after these, in their order
                  || CASE WHEN p_extra IS NULL OR p_extra::text = '{}' THEN '}' ELSE ', ' || substr(p_extra::text, 2)
                     END)::json END) AS e
        FROM shut AS c
        UNION ALL
        SELECT 1, json_build_object('type', 'continuation.ready', 'data', json_build_object(
            'run_id', d.run_id, 'continuation_id', p_cid, 'step_id', p_sid, 'name', d.name))
        FROM made AS d
    ), logged AS (
        INSERT INTO event_batches (first_seq, run_id, at, trace_id, events)
        SELECT parkway_event_seqs((SELECT count(*) FROM every)::integer), c.run_id, p_at, p_trace_id,
               (SELECT json_agg(v.e ORDER BY v.n) FROM every AS v)
        FROM shut AS c
    )
    SELECT c.id::varchar, d.run_id::varchar, d.name::varchar, d.remote FROM shut AS c LEFT JOIN made AS d ON true;
END
$$
"""

# The caller (live, by name or by token hash), the wait read afresh under its step's lock, and the answer
# written when nothing refuses it and the value is vouched for; else the row read, ``outcome`` 'read'.
ANSWER = """
CREATE FUNCTION parkway_answer(
    p_iid varchar, p_pname varchar, p_th varchar, p_vouched varchar[], p_value json, p_secret varchar,
    p_rsp varchar, p_digest varchar, p_at timestamptz, p_cid varchar, p_trace_id varchar, p_traceparent varchar
) RETURNS TABLE (
    outcome varchar, caller_id varchar, caller_name varchar, caller_kind varchar, caller_token_hash varchar,
    id varchar, run_id varchar, step_id varchar, key varchar, kind varchar, schema json, sensitive json,
    target varchar, status varchar, expires_at timestamptz, response_id varchar, response_digest varchar,
    answered_by_id varchar, answered_at timestamptz, quorum integer, level integer, run_status varchar,
    expired boolean, answered_by varchar, place varchar, vouch varchar, due_run_id varchar, due_name varchar,
    due_remote boolean
) LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    sid varchar;
    decided varchar;
    c record;
BEGIN
    outcome := 'read';
    IF p_th IS NOT NULL THEN
        SELECT p.id, p.name, p.kind, p.token_hash, (SELECT x.step_id FROM interactions AS x WHERE x.id = p_iid)
        INTO caller_id, caller_name, caller_kind, caller_token_hash, sid
        FROM principals AS p WHERE p.token_hash = p_th AND p.disabled_at IS NULL;
    ELSE
        SELECT p.id, p.name, p.kind, p.token_hash, (SELECT x.step_id FROM interactions AS x WHERE x.id = p_iid)
        INTO caller_id, caller_name, caller_kind, caller_token_hash, sid
        FROM principals AS p WHERE p.name = p_pname AND p.disabled_at IS NULL;
    END IF;
    IF caller_id IS NULL THEN
        outcome := 'no_caller';
        RETURN NEXT;
        RETURN;
    END IF;
    IF sid IS NULL OR caller_kind NOT IN ('human', 'admin') THEN  -- refused before anything of the wait is read
        id := CASE WHEN sid IS NOT NULL THEN p_iid END;
        RETURN NEXT;
        RETURN;
    END IF;
    PERFORM 1 FROM steps AS x WHERE x.id = sid FOR UPDATE;
    SELECT x.id, x.run_id, x.step_id, x.key, x.kind, x.schema, x.sensitive, x.target, x.status, x.expires_at,
           x.response_id, x.response_digest, x.answered_by_id, x.answered_at, x.quorum, x.level, r.status,
           x.expires_at <= now(), (SELECT p.name FROM principals AS p WHERE p.id = x.answered_by_id),
           parkway_place_of(x.id, caller_id, false), parkway_vouch(x.kind, x.schema, x.sensitive)
    INTO id, run_id, step_id, key, kind, schema, sensitive, target, status, expires_at, response_id,
         response_digest, answered_by_id, answered_at, quorum, level, run_status, expired, answered_by, place, vouch
    FROM interactions AS x JOIN runs AS r ON r.id = x.run_id WHERE x.id = p_iid;
    IF quorum > 1 OR place IS NULL OR status <> 'pending' OR expired
       OR run_status IN ('canceled', 'completed', 'failed', 'interrupted') OR NOT (vouch = ANY (p_vouched)) THEN
        RETURN NEXT;
        RETURN;
    END IF;
    decided := CASE WHEN kind = 'permission' AND (p_value ->> 'approved') IS DISTINCT FROM 'true'
                    THEN 'rejected' ELSE 'answered' END;
    SELECT * INTO c FROM parkway_close(p_iid, sid, decided, p_value, p_secret, p_rsp, p_digest, caller_id, p_at,
                                       p_cid, NULL, p_trace_id, p_traceparent);
    IF c.closed IS NULL THEN  -- not under this lock; read again by the caller
        RETURN NEXT;
        RETURN;
    END IF;
    outcome := decided;
    status := decided;
    due_run_id := c.due_run_id;
    due_name := c.due_name;
    due_remote := c.due_remote;
    RETURN NEXT;
END
$$
"""


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")  # none is taken on a table; should one be, never wait past 1 s
    op.execute(HELD_BY_DELEGATION)
    op.execute(PLACE_OF)
    op.execute(REMOTE_ONLY)
    op.execute(VOUCH)
    op.execute(CLOSE)
    op.execute(ANSWER)


def downgrade() -> None:
    op.execute("DROP FUNCTION parkway_answer(varchar, varchar, varchar, varchar[], json, varchar, varchar, varchar,"
               " timestamptz, varchar, varchar, varchar)")  # fmt: skip
    op.execute("DROP FUNCTION parkway_close(varchar, varchar, varchar, json, varchar, varchar, varchar, varchar,"
               " timestamptz, varchar, json, varchar, varchar)")  # fmt: skip
    op.execute("DROP FUNCTION parkway_vouch(varchar, json, json)")
    op.execute("DROP FUNCTION parkway_remote_only(varchar, varchar, varchar)")
    op.execute("DROP FUNCTION parkway_place_of(varchar, varchar, boolean)")
    op.execute("DROP FUNCTION parkway_held_by_delegation(varchar, varchar)")
