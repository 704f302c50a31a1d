"""Closing a pending interaction so that its step may go on: an answer (first response wins) or its expiry,
the step made due in the same call when it was the last one pending: the server-side functions
``parkway_answer`` and ``parkway_close`` (migration 0027), each run by one ``execute`` of a fixed text. Making
the step due writes its ready continuation alone: the step reads resuming, its run running, from it (0029)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Row, bindparam, select
from sqlalchemy.orm import Session

from models import answers
from models.base import utcnow
from models.status import ContinuationKind, InteractionStatus
from models.store.driver import call
from models.store.interactions import Caller, authorize, interaction_state, refuse_caller, refuse_ended_wait
from models.store.principals import Actor, TokenHolder
from models.store.runs import Due
from models.store.sql import INTER, STEP, Executor, new_id
from parkway import tracing
from parkway.errors import Conflict, Gone, NotFound


@cache
def _answer() -> Any:
    return (
        "SELECT * FROM parkway_answer(%(iid)s, %(pname)s, %(th)s, %(vouched)s::varchar[], %(val)s::json, %(sealed)s,"
        " %(rsp)s, %(digest)s, %(at)s, %(cid)s, %(trace_id)s, %(traceparent)s)"
    )


@cache
def _close() -> Any:
    return (
        "SELECT * FROM parkway_close(%(iid)s, %(sid)s, %(to)s, %(val)s::json, %(sealed)s, %(rsp)s, %(digest)s, %(by)s,"
        " %(at)s, %(cid)s, %(extra)s::json, %(trace_id)s, %(traceparent)s)"
    )


def _made_due(row: Any, cid: str, step_id: str) -> Due | None:
    """The continuation a closing made due (``due_*`` of its row), or ``None`` while others are pending."""
    if row.due_name is None:
        return None
    return Due(cid, ContinuationKind.RESUME.value, row.due_run_id, step_id, row.due_name, bool(row.due_remote))


@dataclass
class AnswerReceipt:
    status: str
    response_id: str
    answered_at: datetime
    continuation: Due | None = None  # set when this answer made the step's continuation due

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "response_id": self.response_id, "answered_at": self.answered_at}


def answer_at_once(
    on: Executor, interaction_id_: str, principal: Caller, value: Any, response_id: str, response_digest: str
) -> AnswerReceipt | tuple[Any, Actor]:
    """pending -> answered|rejected, first response wins, in one call of ``parkway_answer`` (migrations 0027,
    0031): the caller found with the step's lock, then the wait closed on every condition of the answer (the
    wait read only when that wrote nothing). The receipt (``continuation`` set
    when this was the step's last pending interaction); an exact retry (same ``response_id`` and digest)
    gets the first receipt. Refused in ``read_interaction``'s order, then ``Conflict`` (another response
    won) or ``Gone`` (the wait ended unanswered), then ``InvalidAnswer``, nothing written.

    The function writes only a value vouched for (``answers.vouched``: valid against a schema this process
    validated before, with no sensitive field); for any other wait it returns what it read and this
    validates, seals and calls again. A quorum wait: the row read and the principal, for ``respond``."""
    at, cid = utcnow(), new_id()
    params = {"iid": interaction_id_, "pname": None, "th": None, "vouched": answers.vouched(value), "sealed": None,
              "rsp": response_id, "digest": response_digest, "at": at, "cid": cid, "trace_id": tracing.trace_id(),
              "traceparent": tracing.traceparent()}  # fmt: skip
    if isinstance(principal, TokenHolder):
        params["th"] = principal.token_hash
    else:
        params["pname"] = principal if isinstance(principal, str) else principal.name
    params["val"] = json.dumps(value) if params["vouched"] else None  # no value goes where it cannot be written
    for _ in range(2):
        row = call(on, _answer(), params)
        if row.outcome != "read" and row.outcome != "no_caller":
            return AnswerReceipt(row.outcome, response_id, at, _made_due(row, cid, row.step_id))
        actor = refuse_caller(row, principal)
        if row.id is None:
            raise NotFound(f"interaction {interaction_id_} does not exist")
        authorize(row, actor, "answer")
        if row.quorum > 1:
            return row, actor
        settled = _settled_answer(row, response_id, response_digest, actor)
        if settled is not None:
            return settled
        answers.validate_value(row, value)  # pending, and the caller holds a place: the value was not vouched for
        answers.remember(row.vouch, row)
        clear, sealed = answers.seal_value(row, value)
        params.update(vouched=[row.vouch], val=json.dumps(clear), sealed=sealed)
    raise Conflict(f"interaction {interaction_id_} changed while it was answered")  # pragma: no cover


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


def close(on: Executor, interaction: Row[Any], principal: Actor, decision: Decision, **data: Any) -> Any:
    """pending -> answered|rejected with ``decision`` (the step's lock held), and the step made due when this
    was its last pending interaction (``_closing``), its event carrying ``data`` too; ``True``, or ``None``
    when the CAS lost (nothing written)."""
    decision.due, closed = _closing(on, interaction.id, interaction.step_id, decision.status, decision.at,
                                    answer=decision, by=principal.id, extra=data)  # fmt: skip
    return closed or None


def _closing(on: Executor, interaction_id_: str, step_id: str, status: InteractionStatus, at: datetime, *,
             answer: Decision | None = None, by: str | None = None,
             extra: dict[str, Any] | None = None) -> tuple[Due | None, bool]:  # fmt: skip
    """``parkway_close``: the pending interaction closed as ``status`` (with ``answer``'s response, by ``by``;
    ``extra`` added to its event), and when it was the step's last one pending the step made due: the
    continuation made due, or ``None``, and whether the CAS won."""
    cid = new_id()
    row = call(on, _close(), {"iid": interaction_id_, "sid": step_id, "to": status.value,
                            "val": json.dumps(answer.value) if answer else None,
                            "sealed": answer.sealed if answer else None,
                            "rsp": answer.response_id if answer else None, "digest": answer.digest if answer else None,
                            "by": by, "at": at, "cid": cid, "extra": json.dumps(extra) if extra else None,
                            "trace_id": tracing.trace_id(), "traceparent": tracing.traceparent()})  # fmt: skip
    if row is None or row.closed is None:
        return None, False
    return _made_due(row, cid, step_id), True


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
@cache
def _lock_for_expiry() -> Any:
    return (
        select(INTER.c.step_id)
        .join(STEP, STEP.c.id == INTER.c.step_id)
        .where(INTER.c.id == bindparam("iid"))
        .with_for_update(of=STEP, skip_locked=True)
    )


def expire_due(session: Session, interaction_id_: str) -> Expiry:
    """pending -> expired past ``expires_at`` (the database's clock); the step's continuation becomes due
    as for an answer (``parkway_close``).

    Two statements: the step's lock (skipped, and ``expired`` False, when an answer or a cancel holds it, or
    for an unknown id), then the closing with all it implies and the events. ``expired`` is False when the
    CAS lost (nothing is written).
    """
    locked = session.execute(_lock_for_expiry(), {"iid": interaction_id_}).first()
    if locked is None:
        return Expiry(False)
    due, expired = _closing(session, interaction_id_, locked.step_id, InteractionStatus.EXPIRED, utcnow())
    return Expiry(expired, due)
