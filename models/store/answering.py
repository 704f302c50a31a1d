"""Closing a pending interaction so that its step may go on: an answer (first response wins) or its expiry,
the step made due in the same statement when it was the last one pending."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Row, bindparam, exists, select, true, update
from sqlalchemy.orm import Session

from models import answers
from models.base import utcnow
from models.clock import db_now
from models.status import (
    ContinuationKind,
    InteractionKind,
    InteractionStatus,
    RunStatus,
    StepStatus,
)
from models.store.driver import DriverStatement
from models.store.events import event_params, event_row, events_if
from models.store.interactions import (
    INTERACTION,
    InteractionRead,
    interaction_read,
    interaction_state,
    locking,
    may_answer,
    read_interaction,
    refuse_ended_wait,
    run_not_ended,
)
from models.store.principals import Actor
from models.store.runs import Due, ready_continuation
from models.store.sql import CONT, INTER, RUN, STEP, Executor, bp, new_id, word
from parkway.errors import Conflict, Gone

_PENDING = INTER.c.status == word(InteractionStatus.PENDING)
# A closing names the interaction's step too (the one it locked): the planner may then scan the step's
# pending interactions (``ix_interactions_pending``) or the key, never every pending interaction, which it
# chose while its statistics said that index was empty, so that each answer read them all.
_OF_THE_STEP = INTER.c.step_id == bindparam("sid")
# What an answer reads of its interaction (not its prompt, resources, value or closing: fewer columns to
# describe and convert on every answer).
_ANSWER_READS = tuple(
    INTER.c[name]
    for name in ("id", "run_id", "step_id", "key", "kind", "schema", "sensitive", "target", "status", "expires_at",
                 "response_id", "response_digest", "answered_by_id", "answered_at", "quorum", "level")
)  # fmt: skip


# The step's continuation name is read too, for the event of the continuation this answer may make due.
ANSWER_LOCKED = InteractionRead(
    lambda principal_id: locking(interaction_read(principal_id, _ANSWER_READS)).add_columns(
        STEP.c.continuation.label("step_continuation")
    )
)


def closing_makes_due(closing: Any) -> Any:
    """One statement of data-modifying CTEs, under the step's lock (taken by an earlier statement, so this
    one's snapshot shows every answer, cancel and expiry of the step that committed before): ``closing``
    (an UPDATE closing the pending interaction ``:iid`` of the step ``:sid``, returning its id), then, when
    that was the step's last pending interaction, the step parked -> resuming, its run waiting -> running and
    a ready continuation ``:cid``; and the events: ``e0`` (the closing's) if it changed a row, ``e1``
    (``continuation.ready``) if the continuation was made. One row (``closed``, and the continuation's
    ``due_run_id`` and ``due_name`` or NULL) when ``closing`` won; none otherwise."""
    closed = closing.returning(INTER.c.id).cte("closed")
    resuming = (
        update(STEP)
        .where(
            STEP.c.id == bindparam("sid"),
            STEP.c.status == word(StepStatus.PARKED),
            exists(select(closed.c.id)),
            # The statement's snapshot still shows this interaction pending: the others must not be.
            ~exists().where(INTER.c.step_id == STEP.c.id, _PENDING, INTER.c.id != bindparam("iid")),
        )
        .values(status=StepStatus.RESUMING.value, updated_at=bp("at", STEP.c.updated_at))
        .returning(STEP.c.run_id, STEP.c.continuation)
        .cte("resuming")
    )
    resumed = (
        update(RUN)
        # A scalar subquery, not a join with the CTE: the run is then found through its primary key. As a
        # join, the generic plan a pooled connection keeps was chosen while the table was small and
        # scanned every waiting run (a sequential scan of ``runs`` in each answer).
        .where(RUN.c.id == select(resuming.c.run_id).scalar_subquery(), RUN.c.status == word(RunStatus.WAITING))
        .values(status=RunStatus.RUNNING.value, updated_at=bp("at", RUN.c.updated_at))
        .cte("resumed")
    )
    due = (
        ready_continuation(
            ContinuationKind.RESUME,
            bindparam("cid", type_=CONT.c.id.type),
            resuming.c.run_id,
            bindparam("sid", type_=CONT.c.step_id.type),
            resuming.c.continuation,
            resuming,
        )
        .returning(CONT.c.run_id, CONT.c.name, CONT.c.remote)
        .cte("due")
    )
    events = events_if(exists(select(closed.c.id)), exists(select(due.c.name))).cte("events")
    return (
        select(
            closed.c.id.label("closed"),
            due.c.run_id.label("due_run_id"),
            due.c.name.label("due_name"),
            due.c.remote.label("due_remote"),
        )
        .select_from(closed.outerjoin(due, true()))
        .add_cte(resumed, events)
    )


def due_params(run_id: str, step_id: str, continuation: str, closing: dict[str, Any]) -> tuple[Due, dict[str, Any]]:
    """The continuation ``closing_makes_due`` may make (its id drawn here), and the statement's parameters
    for it and for the two events (``closing``'s first)."""
    due = Due(new_id(), ContinuationKind.RESUME.value, run_id, step_id, continuation)
    ready = event_row(run_id, "continuation.ready", continuation_id=due.id, step_id=step_id, name=continuation)
    return due, {"sid": step_id, "cid": due.id, **event_params([closing, ready])}


def made_due(row: Any, due: Due) -> Due | None:
    """``due`` when the row of ``closing_makes_due`` says it was made; ``None`` while others are pending."""
    if row.due_name is None:
        return None
    if (row.due_run_id, row.due_name) != (due.run_id, due.name):  # pragma: no cover - the caller rolls back
        raise RuntimeError(f"step {due.step_id} was made due as {row.due_name}, not {due.name}")
    return replace(due, remote=bool(row.due_remote))


@dataclass
class AnswerReceipt:
    status: str
    response_id: str
    answered_at: datetime
    continuation: Due | None = None  # set when this answer made the step's continuation due

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "response_id": self.response_id, "answered_at": self.answered_at}


_ANSWERED_AT = bp("at", INTER.c.answered_at)
_ANSWER = (
    update(INTER)
    .where(INTER.c.id == bindparam("iid"), _OF_THE_STEP, _PENDING)
    .values(
        status=bindparam("to"),
        value=bp("val", INTER.c.value),
        secret=bindparam("sealed"),
        response_id=bindparam("rsp"),
        response_digest=bindparam("digest"),
        answered_by_id=bindparam("by"),
        answered_at=_ANSWERED_AT,
        closed_at=_ANSWERED_AT,
        answered_level=INTER.c.level,  # the escalation level the decision came at
    )
)


_ANSWER_AND_MAKE_DUE = DriverStatement(
    # Only while the run has not ended, and the answerer still holds a place (none delegated away meanwhile).
    closing_makes_due(_ANSWER.where(run_not_ended(INTER.c.run_id), may_answer(bindparam("by"))))
)


def answer_first(
    session: Executor, interaction: Row[Any], principal: Actor, value: Any, response_id: str, response_digest: str
) -> AnswerReceipt:
    """pending -> answered|rejected, first response wins, for ``interaction`` as ``answer`` read it (the step's
    lock held); an exact retry (same ``response_id`` and digest) returns the first receipt. Losing raises the
    authoritative state: ``Conflict`` (another response won), ``Gone`` (the wait ended unanswered);
    ``InvalidAnswer`` comes before anything is written. ``continuation`` of the receipt is set when this was
    the step's last pending interaction (``None``: others still pending).

    One statement after the read: the CAS with all it implies and the events (``closing_makes_due``). They
    cannot be one: a statement's snapshot predates its wait for the lock, so an answer to a sibling committed
    meanwhile would still look pending, and neither answer would make the step due.
    """
    interaction_id_ = interaction.id
    settled = _settled_answer(interaction, response_id, response_digest, principal)
    if settled is not None:
        return settled
    answers.validate_value(interaction, value)
    # Sensitive fields are stored only sealed, apart from the clear value.
    stored_value, secret = answers.seal_value(interaction, value)
    new_status = InteractionStatus.ANSWERED
    if interaction.kind == InteractionKind.PERMISSION and not value.get("approved"):
        new_status = InteractionStatus.REJECTED
    decision = Decision(new_status, stored_value, secret, response_id, response_digest, utcnow())
    if close(session, interaction, principal, decision) is None:
        # The read's snapshot predates its wait for the step's lock: another answer, a cancel, an expiry or a
        # delegation of the answerer's place may have committed meanwhile, or the run ended. Read again, the
        # lock held, and say which.
        interaction, _ = read_interaction(session, INTERACTION, interaction_id_, principal, "answer")
        settled = _settled_answer(interaction, response_id, response_digest, principal)
        if settled is not None:
            return settled
        raise Conflict(f"interaction {interaction.id} was answered concurrently")  # pragma: no cover
    return AnswerReceipt(new_status.value, response_id, decision.at, decision.due)


@dataclass
class Decision:
    """The response that closes a wait (``close``): its status, the value as stored, the sealed part."""

    status: InteractionStatus
    value: Any
    sealed: str | None
    response_id: str
    digest: str
    at: datetime
    due: Due | None = None  # set by ``close`` when it made the step's continuation due


def close(session: Executor, interaction: Row[Any], principal: Actor, decision: Decision, **data: Any) -> Any:
    """pending -> answered|rejected with ``decision``, and the step made due when this was its last pending
    interaction (``closing_makes_due``), its event carrying ``data`` too; the statement's row, or ``None``
    when the CAS lost (nothing written)."""
    status = decision.status
    answered = event_row(
        interaction.run_id,
        "interaction.answered" if status == InteractionStatus.ANSWERED else "interaction.rejected",
        interaction_id=interaction.id,
        step_id=interaction.step_id,
        key=interaction.key,
        kind=interaction.kind,
        target=interaction.target,
        status=status.value,
        answered_by=principal.name,
        **({"level": interaction.level} if interaction.level else {}),
        **data,
    )
    due, params = due_params(interaction.run_id, interaction.step_id, interaction.step_continuation, answered)
    params.update(iid=interaction.id, to=status.value, val=decision.value, sealed=decision.sealed,
                  rsp=decision.response_id, digest=decision.digest, by=principal.id, at=decision.at)  # fmt: skip
    row = _ANSWER_AND_MAKE_DUE.first(session, params)
    if row is not None:
        decision.due = made_due(row, due)
    return row


def _settled_answer(
    interaction: Row[Any], response_id: str, response_digest: str, principal: Actor
) -> AnswerReceipt | None:
    """``None`` while the interaction can still be answered; the first receipt for an exact retry (the same
    principal's same ``response_id`` and value); otherwise raises ``Conflict`` (another response won, or this
    one was recorded with another value) or ``Gone`` (the wait ended unanswered)."""
    status = interaction.status
    if status in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED):
        if interaction.response_id == response_id and interaction.answered_by_id == principal.id:
            if interaction.response_digest == response_digest:
                assert interaction.answered_at is not None
                return AnswerReceipt(status, response_id, interaction.answered_at)
            raise Conflict(
                f"interaction {interaction.id} was already {status} by response {response_id} with another value",
                interaction_state(interaction),
            )
        raise Conflict(
            f"interaction {interaction.id} was already {status} by another response", interaction_state(interaction)
        )
    if status != InteractionStatus.PENDING:
        raise Gone(
            f"interaction {interaction.id} is {status}; it can no longer be answered", interaction_state(interaction)
        )
    refuse_ended_wait(interaction)
    return None


@dataclass
class Expiry:
    expired: bool
    continuation: Due | None = None  # set when the expiry made the step's continuation due


# The lock of the step, skipped when an answer or a cancel holds it (this pass then leaves the row for the
# next); the lock order is the answer's: the step first, and no interaction is held while taking it.
_LOCK_FOR_EXPIRY = (
    select(INTER.c.run_id, INTER.c.step_id, INTER.c.key, INTER.c.kind, INTER.c.target, STEP.c.continuation)
    .join(STEP, STEP.c.id == INTER.c.step_id)
    .where(INTER.c.id == bindparam("iid"))
    .with_for_update(of=STEP, skip_locked=True)
)
_EXPIRE = closing_makes_due(
    update(INTER)
    .where(INTER.c.id == bindparam("iid"), _OF_THE_STEP, _PENDING, INTER.c.expires_at <= db_now())
    .values(status=InteractionStatus.EXPIRED.value, closed_at=db_now())
)


def expire_due(session: Session, interaction_id_: str) -> Expiry:
    """pending -> expired past ``expires_at`` (the database's clock); the step's continuation becomes due
    as for an answer (``closing_makes_due``).

    Two statements: the step's lock (skipped, and ``expired`` False, when an answer or a cancel holds it, or
    for an unknown id), then the CAS with all it implies and the events. ``expired`` is False when the CAS
    lost (nothing is written).
    """
    locked = session.execute(_LOCK_FOR_EXPIRY, {"iid": interaction_id_}).first()
    if locked is None:
        return Expiry(False)
    expired = event_row(locked.run_id, "interaction.expired", interaction_id=interaction_id_, step_id=locked.step_id,
                        key=locked.key, kind=locked.kind, target=locked.target,
                        status=InteractionStatus.EXPIRED.value)  # fmt: skip
    due, params = due_params(locked.run_id, locked.step_id, locked.continuation, expired)
    row = session.execute(_EXPIRE, {"iid": interaction_id_, "at": utcnow(), **params}).first()
    if row is None:
        return Expiry(False)
    return Expiry(True, made_due(row, due))
