"""The ladder's rungs as SQL (``bench.ladder``): the durable floor plus one contract element per rung.

Like ``bench.bare`` this imports nothing of Parkway: each rung's tables (prefix ``l<k>_``) and statements are
written here, minimal, mirroring WHAT the contract (SPEC 2, 5, 6, 9) needs, not how Parkway's store does it.
Every transition is one statement in autocommit (data-modifying CTEs): the answer and the consume durable,
the claim unflushed (``synchronous_commit=off``), as the floor and Parkway do.

  L1 floor + the event log: the answer's and the consume's statements each append one event-batch row (their
     events as JSON), numbered as Parkway's readers need (transaction id << 16 | n: one batch per transaction
     here, so n = 1), indexed by run.
  L2 + the continuation as its own row (SPEC 5.1, 5.3): the answer closes the wait (receipt: response id, by,
     at) and inserts the continuation; the claim and the consume update the continuation.
  L3 + terminal truth (SPEC 2, 9.8): the consume also writes the step's result and, by compare-and-set, the
     run's terminal status, completed_at and finishing execution.
  L4 + authorization (SPEC 2, 9.6): the answer finds its principal by name and needs a live grant on the
     wait's target; the consume needs the run's owner to still hold its grant on the run's target.
  L5 + the durable terminal projection: the worker writes ``<dir>/<run_id>/run_metadata.json`` (``bench.ladder_app``).
  L6 + the indexes the contract's bounded reads need (sweep, expiry, listings), Parkway's for these tables.
"""

from __future__ import annotations

RUNGS = (1, 2, 3, 4, 5, 6)
TARGET, OWNER, ANSWERER = "team:ladder", "ladder-agent", "ladder-human"
_TERMINAL = "('canceled', 'completed', 'failed', 'interrupted')"
_SEQ = "(pg_current_xact_id()::text::bigint << 16) | 1"  # the transaction's first (and only) batch


def _event(kind: str, **data: str) -> str:
    fields = ", ".join(f"'{k}', {v}" for k, v in data.items())
    return f"json_build_object('type', '{kind}', 'data', json_build_object({fields}))"


def _batch(t: str, source: str, run: str, *events: str) -> str:
    return (
        f"INSERT INTO {t}events (first_seq, run_id, at, events) "
        f"SELECT {_SEQ}, {run}, now(), json_build_array({', '.join(events)}) FROM {source}"
    )


def ddl(k: int) -> list[str]:
    t = f"l{k}_"
    out = [
        f"DROP TABLE IF EXISTS {t}waits, {t}events, {t}conts, {t}steps, {t}runs, {t}principals, {t}grants",
        f"CREATE TABLE {t}waits (id BIGINT PRIMARY KEY, run_id BIGINT NOT NULL, step_id BIGINT NOT NULL, "
        "target VARCHAR(200) NOT NULL, status VARCHAR(16) NOT NULL, value JSONB, lease_until TIMESTAMPTZ, "
        "response_id VARCHAR(64), closed_by VARCHAR(200), closed_at TIMESTAMPTZ, expires_at TIMESTAMPTZ, "
        "created_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        f"CREATE TABLE {t}events (first_seq BIGINT PRIMARY KEY, run_id BIGINT NOT NULL, at TIMESTAMPTZ NOT NULL, "
        "events JSON NOT NULL)",
        f"CREATE INDEX ix_{t}events_run ON {t}events (run_id, first_seq)",
    ]
    if k >= 2:
        out.append(
            f"CREATE TABLE {t}conts (id BIGINT PRIMARY KEY, run_id BIGINT NOT NULL, step_id BIGINT NOT NULL, "
            "status VARCHAR(16) NOT NULL, attempts INT NOT NULL DEFAULT 0, enqueued_at TIMESTAMPTZ, "
            "lease_until TIMESTAMPTZ)"
        )
    if k >= 3:
        out.append(
            f"CREATE TABLE {t}runs (id BIGINT PRIMARY KEY, owner_id BIGINT NOT NULL, target VARCHAR(200) NOT NULL, "
            "status VARCHAR(16) NOT NULL, completed_at TIMESTAMPTZ, execution_id VARCHAR(64), "
            "created_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        out.append(
            f"CREATE TABLE {t}steps (id BIGINT PRIMARY KEY, run_id BIGINT NOT NULL, seq INT NOT NULL, "
            "status VARCHAR(16) NOT NULL, result JSONB, completed_at TIMESTAMPTZ)"
        )
    if k >= 4:
        out.append(
            f"CREATE TABLE {t}principals (id BIGINT PRIMARY KEY, name VARCHAR(200) NOT NULL UNIQUE, "
            "token_hash VARCHAR(128) UNIQUE, disabled_at TIMESTAMPTZ)"
        )
        out.append(
            f"CREATE TABLE {t}grants (id BIGINT PRIMARY KEY, principal_id BIGINT NOT NULL, "
            "target VARCHAR(200) NOT NULL, revoked_at TIMESTAMPTZ)"
        )
        out.append(f"CREATE INDEX ix_{t}grants_live ON {t}grants (principal_id, target) WHERE revoked_at IS NULL")
        out.append(f"INSERT INTO {t}principals (id, name) VALUES (1, '{OWNER}'), (2, '{ANSWERER}')")
        out.append(f"INSERT INTO {t}grants (id, principal_id, target) VALUES (1, 1, '{TARGET}'), (2, 2, '{TARGET}')")
    if k >= 6:
        out += indexes(t)
    return out


# Parkway's indexes on the equivalent tables that a contract read needs bounded (listed in the module's
# report): the sweep's ready / claimed continuations, the expiry of pending waits, a step's pending waits,
# the waits of a run, the answers listed (all, by target, decided), the live runs of an owner (revocation),
# the runs listed, a step by its run. Left out: Parkway's own features' (remote, claimed_by, remind,
# escalate, idempotency key, projection retries) and single-column duplicates of a listed index.
def indexes(t: str) -> list[str]:
    return [
        f"CREATE INDEX ix_{t}conts_ready ON {t}conts (enqueued_at) WHERE status = 'ready'",
        f"CREATE INDEX ix_{t}conts_claimed ON {t}conts (lease_until) WHERE status = 'claimed'",
        f"CREATE INDEX ix_{t}waits_expiry ON {t}waits (expires_at) WHERE status = 'pending' AND expires_at IS NOT NULL",
        f"CREATE INDEX ix_{t}waits_pending ON {t}waits (step_id) WHERE status = 'pending'",
        f"CREATE INDEX ix_{t}waits_run ON {t}waits (run_id)",
        f"CREATE INDEX ix_{t}waits_listed ON {t}waits (status, created_at, id)",
        f"CREATE INDEX ix_{t}waits_target_listed ON {t}waits (target, status, created_at, id)",
        f"CREATE INDEX ix_{t}waits_decided ON {t}waits (closed_at, id) WHERE closed_at IS NOT NULL",
        f"CREATE INDEX ix_{t}runs_live_owner ON {t}runs (owner_id, target) WHERE completed_at IS NULL",
        f"CREATE INDEX ix_{t}runs_listed ON {t}runs (created_at, id)",
        f"CREATE INDEX ix_{t}runs_target_listed ON {t}runs (target, created_at, id)",
        f"CREATE UNIQUE INDEX uq_{t}steps_run_seq ON {t}steps (run_id, seq)",
    ]


def seed(k: int) -> list[str]:
    """Statements making waits ``%(first)s``..``%(last)s`` pending (run, step and wait share the number)."""
    t, g = f"l{k}_", "generate_series(%(first)s::bigint, %(last)s::bigint) g"
    status = "'waiting'" if k == 1 else "'pending'"
    out = [f"INSERT INTO {t}waits (id, run_id, step_id, target, status) SELECT g, g, g, '{TARGET}', {status} FROM {g}"]
    if k >= 3:
        out.append(f"INSERT INTO {t}runs (id, owner_id, target, status) SELECT g, 1, '{TARGET}', 'waiting' FROM {g}")
        out.append(f"INSERT INTO {t}steps (id, run_id, seq, status) SELECT g, g, 1, 'parked' FROM {g}")
    return out


def done(k: int) -> str:
    """The count of completions among ``%(first)s``..``%(last)s``."""
    if k == 1:
        return "SELECT count(*) FROM l1_waits WHERE id BETWEEN %(first)s AND %(last)s AND status = 'done'"
    return f"SELECT count(*) FROM l{k}_conts WHERE id BETWEEN %(first)s AND %(last)s AND status = 'consumed'"


_ANSWERED = _event("interaction.answered", interaction_id="w.id", step_id="w.step_id", by="%(who)s::text")
_READY = _event("continuation.ready", run_id="w.run_id", continuation_id="w.id", step_id="w.step_id")


def answer(k: int) -> str:
    """Params ``id``, ``value``, ``who``, ``response_id``; returns a row when the wait was answered."""
    t = f"l{k}_"
    if k == 1:
        closing = (
            f"UPDATE {t}waits SET status = 'answered', value = %(value)s "
            "WHERE id = %(id)s AND status = 'waiting' RETURNING id, run_id, step_id"
        )
        return f"WITH w AS ({closing}), e AS ({_batch(t, 'w', 'w.run_id', _ANSWERED, _READY)}) SELECT id FROM w"
    who, place, where = "%(who)s", "", ""
    if k >= 4:  # the caller is found by name, and must hold a live grant on the wait's target
        place = f"p AS (SELECT id FROM {t}principals WHERE name = %(who)s AND disabled_at IS NULL), "
        who, where = (
            "p.id::text",
            (
                f" AND EXISTS (SELECT 1 FROM {t}grants AS g WHERE g.principal_id = p.id AND g.target = x.target "
                "AND g.revoked_at IS NULL)"
            ),
        )
    closing = (
        f"UPDATE {t}waits AS x SET status = 'answered', value = %(value)s, response_id = %(response_id)s, "
        f"closed_by = {who}, closed_at = now() {'FROM p ' if k >= 4 else ''}"
        f"WHERE x.id = %(id)s AND x.status = 'pending'{where} RETURNING x.id, x.run_id, x.step_id"
    )
    made = (
        f"INSERT INTO {t}conts (id, run_id, step_id, status, enqueued_at) "
        "SELECT w.id, w.run_id, w.step_id, 'ready', now() FROM w RETURNING id"
    )
    log = _batch(t, "w", "w.run_id", _ANSWERED, _READY)
    return f"WITH {place}w AS ({closing}), c AS ({made}), e AS ({log}) SELECT id FROM c"


def claim(k: int) -> str:
    """Param ``id``; returns the answer's value when claimed (ready -> claimed under a lease)."""
    t = f"l{k}_"
    if k == 1:
        return (
            f"UPDATE {t}waits SET status = 'claimed', lease_until = now() + interval '30 seconds' "
            "WHERE id = %(id)s AND status = 'answered' RETURNING value"
        )
    return (
        f"UPDATE {t}conts AS c SET status = 'claimed', attempts = c.attempts + 1, "
        f"lease_until = now() + interval '30 seconds' FROM {t}waits AS w "
        "WHERE c.id = %(id)s AND c.status = 'ready' AND w.id = c.id RETURNING w.value"
    )


_RESUMED = _event("step.resumed", step_id="c.step_id", continuation_id="c.id")
_COMPLETED = _event("step.completed", step_id="c.step_id")
_RUN_DONE = _event("run.completed", run_id="c.run_id", execution_id="%(execution)s::text")


def consume(k: int) -> str:
    """Params ``id``, ``execution``, ``result``; returns (run id, status, completed_at) when consumed."""
    t = f"l{k}_"
    log = _batch(t, "c", "c.run_id", _RESUMED, _COMPLETED, _RUN_DONE)
    if k == 1:
        consumed = (
            f"UPDATE {t}waits SET status = 'done', lease_until = NULL "
            "WHERE id = %(id)s AND status = 'claimed' RETURNING id, run_id, step_id"
        )
        return f"WITH c AS ({consumed}), e AS ({log}) SELECT run_id, 'completed', now() FROM c"
    authority = ""
    if k >= 4:  # SPEC 9.6: the run's owner still holds its grant on the run's target
        authority = (
            f" AND EXISTS (SELECT 1 FROM {t}runs AS r JOIN {t}grants AS g ON g.principal_id = r.owner_id "
            "AND g.target = r.target AND g.revoked_at IS NULL WHERE r.id = x.run_id)"
        )
    consumed = (
        f"UPDATE {t}conts AS x SET status = 'consumed', lease_until = NULL "
        f"WHERE x.id = %(id)s AND x.status = 'claimed'{authority} RETURNING x.id, x.run_id, x.step_id"
    )
    if k == 2:
        return f"WITH c AS ({consumed}), e AS ({log}) SELECT run_id, 'completed', now() FROM c"
    step = (
        f"UPDATE {t}steps AS s SET status = 'completed', result = %(result)s, completed_at = now() FROM c "
        "WHERE s.id = c.step_id AND s.status = 'parked' RETURNING s.id"
    )
    run = (
        f"UPDATE {t}runs AS r SET status = 'completed', completed_at = now(), execution_id = %(execution)s "
        f"FROM c WHERE r.id = c.run_id AND r.completed_at IS NULL AND r.status NOT IN {_TERMINAL} "
        "RETURNING r.id, r.status, r.completed_at"
    )
    return f"WITH c AS ({consumed}), s AS ({step}), r AS ({run}), e AS ({log}) SELECT id, status, completed_at FROM r"
