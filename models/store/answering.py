"""Answering an interaction: first response wins, the step made due in the same statement."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, bindparam, exists, insert, literal, select, true, update

from models import answers
from models.base import utcnow
from models.clock import db_now
from models.status import (
    RUN_TERMINAL,
    ContinuationKind,
    ContinuationStatus,
    InteractionKind,
    InteractionStatus,
    RunStatus,
    StepStatus,
)
from models.store.driver import DriverStatement
from models.store.events import event_params, event_row, events_if
from models.store.interactions import (
    INTERACTION,
    interaction_read,
    interaction_state,
    read_interaction,
    refuse_ended_wait,
)
from models.store.principals import Actor
from models.store.runs import Due
from models.store.sql import CONT, INTER, RUN, STEP, Executor, bp, new_id, word, words
from parkway.errors import Conflict, Gone

# What an answer reads of its interaction (not its prompt, resources, value or closing: fewer columns to
# describe and convert on every answer).
_ANSWER_READS = tuple(
    INTER.c[name]
    for name in ("id", "run_id", "step_id", "key", "kind", "schema", "sensitive", "target", "status", "expires_at",
                 "response_id", "response_digest", "answered_by_id", "answered_at")
)  # fmt: skip


def _interaction_locked(read: Any) -> Any:
    """PostgreSQL, for an answer: ``read``, and the step's lock taken by it. Its rows come from the
    statement's snapshot, taken before any wait for that lock: when the answer's CAS then loses, the
    interaction is read again (``INTERACTION``), the lock held by then. The step's continuation name is
    read too, for the event of the continuation this answer may make due."""
    return (
        read.add_columns(STEP.c.continuation.label("step_continuation"))
        .join(STEP, STEP.c.id == INTER.c.step_id)
        .with_for_update(of=STEP)
    )


_INTERACTION_LOCKED = DriverStatement(_interaction_locked(interaction_read(bindparam("pid"), _ANSWER_READS)))


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
    .where(INTER.c.id == bindparam("iid"), INTER.c.status == word(InteractionStatus.PENDING))
    .values(
        status=bindparam("to"),
        value=bp("val", INTER.c.value),
        secret=bindparam("sealed"),
        response_id=bindparam("rsp"),
        response_digest=bindparam("digest"),
        answered_by_id=bindparam("by"),
        answered_at=_ANSWERED_AT,
        closed_at=_ANSWERED_AT,
    )
)


def _answer_and_make_due() -> Any:
    """PostgreSQL: ``_ANSWER`` (only while the run has not ended), then ``make_due_if_settled`` when that
    was the step's last pending interaction (the step's CAS, the run back to running, the ready
    continuation ``:cid``), and the events (the answer's, then the continuation's if it was made due) as one
    statement of data-modifying CTEs. Each later part runs only if the one before it changed a row. One
    row (``answered``, and the continuation's ``due_name`` or NULL) when the answer's CAS won; none
    otherwise."""
    run_not_ended = exists().where(
        RUN.c.id == INTER.c.run_id, ~RUN.c.status.in_(words(sorted(s.value for s in RUN_TERMINAL)))
    )
    answered = _ANSWER.where(run_not_ended).returning(INTER.c.id).cte("answered")
    resuming = (
        update(STEP)
        .where(
            STEP.c.id == bindparam("sid"),
            STEP.c.status == word(StepStatus.PARKED),
            exists(select(answered.c.id)),
            # The statement's snapshot still shows this interaction pending: the others must not be.
            ~exists().where(
                INTER.c.step_id == STEP.c.id,
                INTER.c.status == word(InteractionStatus.PENDING),
                INTER.c.id != bindparam("iid"),
            ),
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
        insert(CONT)
        .from_select(
            ["id", "run_id", "step_id", "kind", "name", "status", "attempts", "publishes", "enqueued_at", "created_at"],
            select(
                bindparam("cid", type_=CONT.c.id.type),
                resuming.c.run_id,
                bindparam("sid", type_=CONT.c.step_id.type),
                literal(ContinuationKind.RESUME.value),
                resuming.c.continuation,
                literal(ContinuationStatus.READY.value),
                literal(0),
                literal(1),  # published right after this commit; if that publish is lost the sweep sends it again
                db_now(),  # the re-enqueue age is measured on the database's clock
                db_now(),
            ),
        )
        .returning(CONT.c.run_id, CONT.c.name)
        .cte("due")
    )
    events = events_if(exists(select(answered.c.id)), exists(select(due.c.name))).cte("events")
    return (
        select(answered.c.id.label("answered"), due.c.run_id.label("due_run_id"), due.c.name.label("due_name"))
        .select_from(answered.outerjoin(due, true()))
        .add_cte(resumed, events)
    )


_ANSWER_AND_MAKE_DUE = DriverStatement(_answer_and_make_due())


def answer(
    session: Executor, interaction_id_: str, *, value: Any, response_id: str, response_digest: str, principal: Actor
) -> AnswerReceipt:
    """pending -> answered|rejected, first response wins; an exact retry (same ``response_id`` and
    digest) returns the first receipt. Losing raises the authoritative state: ``Conflict`` (another
    response won), ``Gone`` (the wait ended unanswered); ``NotFound``, then ``WrongKind``/``Forbidden``
    (as ``authorize``), then ``InvalidAnswer`` come before anything is written. ``continuation`` of the
    receipt is set when this was the step's last pending interaction (``None``: others still pending).

    Two statements: the read that takes the step's lock, then the CAS with all it implies and the events
    (``_ANSWER_AND_MAKE_DUE``).
    """
    interaction, run_status = read_interaction(session, _INTERACTION_LOCKED, interaction_id_, principal, "answer")
    settled = _settled_answer(session, interaction, run_status, response_id, response_digest)
    if settled is not None:
        return settled
    answers.validate_value(interaction, value)
    # Sensitive fields are stored only sealed, apart from the clear value.
    stored_value, secret = answers.seal_value(interaction, value)
    new_status = InteractionStatus.ANSWERED
    if interaction.kind == InteractionKind.PERMISSION and not value.get("approved"):
        new_status = InteractionStatus.REJECTED
    now = utcnow()
    params = {
        "iid": interaction.id,
        "to": new_status.value,
        "val": stored_value,
        "sealed": secret,
        "rsp": response_id,
        "digest": response_digest,
        "by": principal.id,
        "at": now,
    }
    answered = event_row(
        interaction.run_id,
        "interaction.answered" if new_status == InteractionStatus.ANSWERED else "interaction.rejected",
        interaction_id=interaction.id,
        step_id=interaction.step_id,
        key=interaction.key,
        status=new_status.value,
        answered_by=principal.name,
    )
    receipt = AnswerReceipt(new_status.value, response_id, now)
    due = Due(new_id(), ContinuationKind.RESUME.value, interaction.run_id, interaction.step_id,
              interaction.step_continuation)  # fmt: skip
    ready = event_row(due.run_id, "continuation.ready", continuation_id=due.id, step_id=due.step_id, name=due.name)
    params.update(sid=interaction.step_id, cid=due.id, **event_params([answered, ready]))
    combined = _ANSWER_AND_MAKE_DUE.first(session, params)
    if combined is None:
        # The read's snapshot predates its wait for the step's lock: another answer, a cancel or an expiry
        # may have committed meanwhile, or the run ended. Read again, the lock held, and say which.
        interaction, run_status = read_interaction(session, INTERACTION, interaction_id_, principal, "answer")
        settled = _settled_answer(session, interaction, run_status, response_id, response_digest)
        if settled is not None:
            return settled
        raise Conflict(f"interaction {interaction.id} was answered concurrently")  # pragma: no cover
    if combined.due_name is not None:
        if (combined.due_run_id, combined.due_name) != (due.run_id, due.name):  # pragma: no cover - rolls back
            raise RuntimeError(f"step {due.step_id} was made due as {combined.due_name}, not {due.name}")
        receipt.continuation = due
    return receipt


def _settled_answer(
    session: Executor, interaction: Row[Any], run_status: str, response_id: str, response_digest: str
) -> AnswerReceipt | None:
    """``None`` while the interaction can still be answered; the first receipt for an exact retry;
    otherwise raises ``Conflict`` (another response won) or ``Gone`` (the wait ended unanswered)."""
    status = interaction.status
    if status in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED):
        if interaction.response_id == response_id and interaction.response_digest == response_digest:
            assert interaction.answered_at is not None
            return AnswerReceipt(status, response_id, interaction.answered_at)
        raise Conflict(
            f"interaction {interaction.id} was already {status} by another response",
            interaction_state(session, interaction),
        )
    if status != InteractionStatus.PENDING:
        raise Gone(
            f"interaction {interaction.id} is {status}; it can no longer be answered",
            interaction_state(session, interaction),
        )
    refuse_ended_wait(session, interaction, run_status)
    return None
