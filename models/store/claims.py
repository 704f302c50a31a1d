"""Claiming a continuation under a lease, and everything its body reads, in one statement."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Boolean, Connection, Row, and_, bindparam, case, exists, func, null, or_, select, update
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.orm import Session

from models.clock import db_now
from models.derived import run_status
from models.status import ContinuationStatus, InteractionKind, InteractionStatus, PrincipalKind, ReviewStatus
from models.store.driver import DriverStatement
from models.store.sql import CONT, GRANT, INTER, PRIN, RESP, REV, RUN, STEP, TRACEPARENT, Executor, word
from parkway.crypto import join_sensitive


@dataclass(frozen=True)
class StepRef:
    id: str
    run_id: str
    name: str
    payload: Any
    snapshot: Any


@dataclass(frozen=True)
class Claim:
    """A continuation this execution holds, with what its body needs to run (read at claim)."""

    continuation: Row[Any] | Claimed  # id, run_id, step_id, kind, name, attempts
    step: StepRef
    run_id: str
    run_status: str  # a Celery claim's: the stored word (``refusal`` compares it with the ended ones only)
    owner_name: str
    granted: bool  # the owner holds a live grant on the run's target now (admins hold every target)
    review_running: bool  # a review of the step was running when it was claimed (an earlier execution's)
    answers: dict[str, Answer]  # the step's interactions by key (sealed values still sealed)
    # When traced: what made it due, the execution that claimed it before (a re-drive), then its parks.
    follows: tuple[str | None, ...] = ()
    waited_s: float | None = None  # a resume: from its park to the last answer it resumes on


def claimable() -> Any:
    """ready, or claimed under a lease that expired by the database's clock: the one definition the claim
    and ``give_up_exhausted`` share."""
    return or_(
        CONT.c.status == word(ContinuationStatus.READY),
        and_(CONT.c.status == word(ContinuationStatus.CLAIMED), CONT.c.lease_expires_at < db_now()),
    )


def live_claim(execution_id: Any) -> Any:
    """Claimed by ``execution_id`` under a lease that has not run out by the database's clock: the one
    definition of "this execution holds it", for a renewal, a consume, the SDK's own writes and a review's
    owner (the complement of ``claimable``'s expired lease: once it runs out, the execution holds nothing)."""
    return and_(
        CONT.c.status == word(ContinuationStatus.CLAIMED),
        CONT.c.claimed_by == execution_id,
        CONT.c.lease_expires_at >= db_now(),
    )


@cache
def _claim() -> Any:
    return (
        update(CONT)
        # A remote continuation is leased over HTTP (models/store/leases.py), never claimed by a Celery worker.
        .where(CONT.c.id == bindparam("cid"), claimable(), CONT.c.attempts < bindparam("max_attempts"), ~CONT.c.remote)
        .values(
            status=ContinuationStatus.CLAIMED.value,
            attempts=CONT.c.attempts + 1,
            claimed_by=bindparam("eid"),
            lease_expires_at=db_now("lease_s"),
            claimed_trace=TRACEPARENT,  # the claiming execution's span, for a re-drive to link to
        )
        .returning(CONT.c.id, CONT.c.run_id, CONT.c.step_id, CONT.c.kind, CONT.c.name, CONT.c.attempts)
    )


_ANSWERER = PRIN.alias("answerer")
_RESPONDER = PRIN.alias("responder")


# A quorum wait's responses in the order they came (each principal's sealed part is in the interaction's).
@cache
def _responses_of_quorum() -> Any:
    return (
        select(func.json_agg(aggregate_order_by(
            func.json_build_object("principal", _RESPONDER.c.name, "value", RESP.c.value, "at", RESP.c.at,
                                   "level", RESP.c.level, "pid", RESP.c.principal_id),
            RESP.c.at)))
        .select_from(RESP.join(_RESPONDER, _RESPONDER.c.id == RESP.c.principal_id))
        .where(RESP.c.interaction_id == INTER.c.id)
        .scalar_subquery()
    )  # fmt: skip


_CLAIMED_COLUMNS = ("id", "run_id", "step_id", "kind", "name", "attempts")
_BEFORE = CONT.alias("before")


def _claim_context(claimed: Any = None, *, derived: bool = True, responses: bool = True) -> Any:
    """Everything the body needs and the refusal checks read, as one joined query: the step, its run's
    status (``derived=False``: the stored word, for a refusal that compares it with the ended words only,
    which the rule of models/derived.py leaves as stored: no call of it), the owner's grant, whether a
    review of the step is running, and the step's interactions (a row each; none for a step that never
    parked) with who answered them. ``claimed`` (the claim's
    ``RETURNING`` as a CTE, PostgreSQL) makes it the claim and this read in one statement; without it the
    read is of the step ``:sid``. ``responses=False``: a quorum wait's responses are not read (``i_responses``
    NULL), its ``i_quorum`` says whether they are needed."""
    columns = [
        STEP.c.id,
        STEP.c.run_id,
        STEP.c.name,
        STEP.c.payload,
        STEP.c.snapshot,
        (run_status(RUN) if derived else RUN.c.status).label("run_status"),
        PRIN.c.name.label("owner_name"),
        or_(
            PRIN.c.kind == word(PrincipalKind.ADMIN),
            exists().where(
                GRANT.c.principal_id == PRIN.c.id, GRANT.c.target == RUN.c.target, GRANT.c.revoked_at.is_(None)
            ),
        ).label("granted"),
        exists().where(REV.c.step_id == STEP.c.id, REV.c.status == word(ReviewStatus.RUNNING)).label("review_running"),
        INTER.c.key.label("i_key"),
        INTER.c.kind.label("i_kind"),
        INTER.c.status.label("i_status"),
        INTER.c.value.label("i_value"),
        INTER.c.secret.label("i_secret"),
        _ANSWERER.c.name.label("i_answered_by"),
        INTER.c.answered_at.label("i_answered_at"),
        INTER.c.answered_level.label("i_answered_level"),
        (case((INTER.c.quorum > 1, _responses_of_quorum()), else_=None) if responses else null()).label("i_responses"),
        INTER.c.quorum.label("i_quorum"),
        INTER.c.traceparent.label("i_traceparent"),
        INTER.c.created_at.label("i_asked_at"),
    ]
    joined = (
        STEP.join(RUN, RUN.c.id == STEP.c.run_id)
        .join(PRIN, PRIN.c.id == RUN.c.owner_id)
        .outerjoin(INTER, INTER.c.step_id == STEP.c.id)
        .outerjoin(_ANSWERER, _ANSWERER.c.id == INTER.c.answered_by_id)
    )
    if claimed is None:
        columns += [null().label("made_by"), null().label("claimed_before")]
        return select(*columns).select_from(joined).where(STEP.c.id == bindparam("sid"))
    columns += [claimed.c[name].label(f"c_{name}") for name in _CLAIMED_COLUMNS]
    # The row as it was before this statement's claim (its snapshot): whose span made it due, claimed it last.
    columns += [_BEFORE.c.traceparent.label("made_by"), _BEFORE.c.claimed_trace.label("claimed_before")]
    before = claimed.join(_BEFORE, _BEFORE.c.id == claimed.c.id)
    return select(*columns).select_from(before.join(joined, STEP.c.id == claimed.c.step_id))


@cache
def _claim_read() -> Any:
    return _claim_context(derived=False)


# PostgreSQL: the claim's compare-and-set and the joined read in one statement (one round trip, no transaction
# around them); a quorum wait's responses (a subquery every claim would start) are read after it, when needed.
_CLAIM_WITH_CONTEXT = DriverStatement(lambda: _claim_context(_claim().cte("claimed"), derived=False, responses=False))


@dataclass(frozen=True)
class Claimed:
    """The continuation row as the claim left it."""

    id: str
    run_id: str
    step_id: str
    kind: str
    name: str
    attempts: int


def claim_in_one_statement(
    conn: Connection, continuation_id: str, *, execution_id: str, lease_s: float, max_attempts: int
) -> Claim | None:
    """``claim`` and ``load_claim`` as one statement, for a connection in autocommit (PostgreSQL only).

    ``None`` when nothing was claimed (see ``claim``); the caller then looks at the row in a transaction.
    """
    params = {"cid": continuation_id, "max_attempts": max_attempts, "eid": execution_id, "lease_s": lease_s}
    rows = _CLAIM_WITH_CONTEXT.rows(conn, params)
    if not rows:
        return None
    claimed = _claimed(rows[0])
    if any(row.i_quorum is not None and row.i_quorum > 1 for row in rows):
        # the step's waits are closed and their responses final: a read after the claim sees what it would have
        again = conn.execute(_claim_read(), {"sid": claimed.step_id}).all()
        return _claim_from_rows(claimed, rows, {row.i_key: row.i_responses for row in again})
    return _claim_from_rows(claimed, rows)


def _claimed(row: Any) -> Claimed:
    return Claimed(*(getattr(row, f"c_{name}") for name in _CLAIMED_COLUMNS))


def with_context(claimed: Any) -> Any:
    """The joined read of ``load_claim`` for every row of ``claimed`` (a CTE of claimed continuations: a
    claim's ``RETURNING`` of id, run_id, step_id, kind, name, attempts), with the claim's own columns as
    ``c_<name>``: many claims and what their bodies read in one statement (``claims_of`` groups its rows)."""
    return _claim_context(claimed)


def claims_of(rows: Sequence[Row[Any]]) -> list[tuple[Claim, Row[Any]]]:
    """The claims of a ``with_context`` statement's rows (a row per interaction), each with its first row,
    in the order they came."""
    by_id: dict[str, list[Row[Any]]] = {}
    for row in rows:
        by_id.setdefault(row.c_id, []).append(row)
    return [(_claim_from_rows(_claimed(group[0]), group), group[0]) for group in by_id.values()]


def claim(
    session: Session | Connection, continuation_id: str, *, execution_id: str, lease_s: float, max_attempts: int
) -> Row[Any] | None:
    """ready -> claimed (or an expired claim -> claimed), attempts + 1, with a lease.

    Returns the claimed row (id, run_id, step_id, kind, name, attempts). ``None`` when the row is
    consumed, dead, unknown, held under a live lease by someone else, or out of attempts (see
    ``give_up_exhausted``): the caller's delivery does nothing. The lease ends ``lease_s`` after the
    database's clock.
    """
    return session.execute(
        _claim(), {"cid": continuation_id, "max_attempts": max_attempts, "eid": execution_id, "lease_s": lease_s}
    ).first()


def load_claim(session: Executor, continuation: Row[Any] | Claimed) -> Claim:
    """Everything the body needs and the refusal checks read, in one joined read after the claim (see
    ``_claim_context``)."""
    return _claim_from_rows(continuation, session.execute(_claim_read(), {"sid": continuation.step_id}).all())


def _claim_from_rows(
    continuation: Row[Any] | Claimed, rows: Sequence[Row[Any]], responses: dict[str, Any] | None = None
) -> Claim:
    """The claim of ``rows`` (a row per interaction), each quorum wait's responses from its ``i_responses`` or,
    when given, ``responses`` by key."""
    row = rows[0]
    quorum = {i.i_key: i.i_responses if responses is None else responses.get(i.i_key) for i in rows}
    answered = (InteractionStatus.ANSWERED, InteractionStatus.REJECTED)
    answers = {
        i.i_key: Answer(
            key=i.i_key,
            kind=i.i_kind,
            status=i.i_status,
            value=i.i_value if i.i_status in answered else None,
            answered_by=i.i_answered_by,
            sealed=i.i_secret if i.i_status == InteractionStatus.ANSWERED or quorum[i.i_key] else None,
            responses=_responses(i, quorum[i.i_key]),
        )
        for i in rows
        if i.i_key is not None
    }
    return Claim(
        continuation=continuation,
        step=StepRef(id=row.id, run_id=row.run_id, name=row.name, payload=row.payload, snapshot=row.snapshot),
        run_id=row.run_id,
        run_status=row.run_status,
        owner_name=row.owner_name,
        granted=bool(row.granted),
        review_running=bool(row.review_running),
        answers=answers,
        follows=(row.made_by, row.claimed_before, *sorted({i.i_traceparent for i in rows if i.i_traceparent})),
        waited_s=_waited(rows),
    )


def _waited(rows: Sequence[Row[Any]]) -> float | None:
    asked = [i.i_asked_at for i in rows if i.i_asked_at is not None]
    answered = [i.i_answered_at for i in rows if i.i_answered_at is not None]
    return (max(answered) - min(asked)).total_seconds() if asked and answered else None


def _responses(i: Row[Any], quorum: Any) -> list[Response]:
    """Every response to the interaction: a quorum wait's rows (``quorum``), or the one answer of any other."""
    if quorum is not None:
        return [Response(r["principal"], r["value"], datetime.fromisoformat(r["at"]), r["level"], r["pid"])
                for r in quorum]  # fmt: skip
    if i.i_answered_by is None or i.i_status not in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED):
        return []
    return [Response(i.i_answered_by, i.i_value, i.i_answered_at, i.i_answered_level or 0)]


def renew_lease(session: Executor, continuation_id: str, *, execution_id: str, lease_s: float) -> datetime | None:
    """claimed -> claimed with a lease ending ``lease_s`` after the database's clock, only for the
    execution whose lease is live (``live_claim``: one that ran out is not revived); the lease's new end,
    or ``None`` when it holds it no more."""
    expires: datetime | None = session.scalar(
        update(CONT)
        .where(CONT.c.id == continuation_id, live_claim(execution_id))
        .values(lease_expires_at=db_now(lease_s))
        .returning(CONT.c.lease_expires_at)
    )
    return expires


@cache
def _release_claim() -> Any:
    return (
        update(CONT)
        .where(CONT.c.id == bindparam("cid"), live_claim(bindparam("eid")))
        .values(status=ContinuationStatus.READY.value, claimed_by=None, lease_expires_at=None, enqueued_at=db_now(),
                publishes=CONT.c.publishes + 1, attempts=CONT.c.attempts - bindparam("unspent"),
                reason=func.coalesce(bindparam("why", type_=CONT.c.reason.type), CONT.c.reason),
                remote=or_(CONT.c.remote, bindparam("remote", type_=Boolean)))
        .returning(CONT.c.id)
    )  # fmt: skip


def release_claim(
    session: Executor,
    continuation_id: str,
    *,
    execution_id: str,
    reason: str | None,
    spent: bool = True,
    remote: bool = False,
) -> bool:
    """claimed -> ready, only by the execution holding the live claim, as the sweep releases an expired one
    (stamped as published now) but at once, noting ``reason`` (why it stopped: what a give-up out of
    attempts reports). ``spent``: the attempt counts (a body ran); else it is given back (nothing ran: a
    worker that does not run the version hands it on). ``remote``: it is for remote workers from now on
    (only they serve its key: a Celery worker that claimed it hands it to their lease calls). ``False`` when
    it holds it no more (nothing is written)."""
    params = {"cid": continuation_id, "eid": execution_id, "why": reason, "unspent": 0 if spent else 1,
              "remote": remote}  # fmt: skip
    return session.execute(_release_claim(), params).first() is not None


@cache
def _holds_live_claim() -> Any:
    return select(CONT.c.id).where(live_claim(bindparam("eid"))).with_for_update(read=True)


def holds_live_claim(session: Executor, execution_id: str) -> bool:
    """Whether ``execution_id`` holds a live claim, its row then locked ``FOR SHARE`` until the caller's
    transaction ends: what that transaction writes commits only while the claim is this execution's (the
    sweep cannot release it, nor another execution take it, meanwhile)."""
    return session.execute(_holds_live_claim(), {"eid": execution_id}).first() is not None


@dataclass
class Response:
    """One principal's response to an interaction, as a continuation sees it."""

    principal: str
    value: Any
    at: datetime
    level: int = 0  # the escalation level of the wait when it came
    principal_id: str | None = field(default=None, repr=False)


@dataclass
class Answer:
    """What a continuation sees of one interaction."""

    key: str
    kind: str
    status: str
    value: Any
    answered_by: str | None
    sealed: str | None = field(default=None, repr=False)
    responses: list[Response] = field(default_factory=list)  # every response (a quorum wait's), in order

    def unseal(self) -> None:
        """Join the sensitive fields back into the value (and each response's), for the continuation
        that consumes them; a quorum wait keeps each principal's sealed part under its id."""
        if self.sealed is None:
            return
        if not self.sealed.startswith("{"):  # one answer's sealed token
            self.value = join_sensitive(self.value, self.sealed)
            for response in self.responses:
                response.value = self.value
        else:
            tokens = json.loads(self.sealed)
            for response in self.responses:
                response.value = join_sensitive(response.value, tokens.get(response.principal_id or ""))
            if self.status == InteractionStatus.ANSWERED and self.responses:
                self.value = self.responses[-1].value  # the deciding response's
        self.sealed = None

    @property
    def approved(self) -> bool:
        return (
            self.kind == InteractionKind.PERMISSION
            and self.status == InteractionStatus.ANSWERED
            and isinstance(self.value, dict)
            and self.value.get("approved") is True
        )
