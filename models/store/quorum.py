"""Answering: the first response wins (``answering.answer_at_once``), or, for a wait that needs ``quorum``
responses in distinct places (docs/teams.md), each is recorded until one decides.

Each principal's response is a row of ``interaction_responses`` with its own receipt, in the place its
principal holds (``place_of``: its own, or one delegated to it), one per place; the response that
decides closes the interaction as a first-response answer does (``answering.close``: the step made due
exactly once). All of it runs under the step's lock, taken by the answer's first read: the responses of one
wait are serialized, so each reads every response committed before it.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from sqlalchemy import Row, and_, bindparam, func, insert, select, update

from models import answers
from models.base import utcnow
from models.status import InteractionKind, InteractionStatus, PrincipalKind
from models.store.answering import AnswerReceipt, Decision, answer_at_once, close
from models.store.driver import in_autocommit
from models.store.events import append_events, event_row
from models.store.interactions import (
    Caller,
    authorize,
    interaction_read,
    interaction_state,
    may_answer,
    refuse_ended_wait,
)
from models.store.principals import Actor
from models.store.sql import INTER, PRIN, RESP, STEP, Executor, bp, word, words
from parkway.errors import Conflict, Gone

_MINE = RESP.alias("mine")
_OTHER = PRIN.alias("other")


def _count(*where: Any) -> Any:
    return select(func.count()).where(RESP.c.interaction_id == INTER.c.id, *where).scalar_subquery()


def _could_still_answer() -> Any:
    """Live people who may answer this wait (at any escalation level) and have not responded yet: what a
    permission's ``unreachable`` policy counts."""
    on_target = and_(
        may_answer(_OTHER.c.id, every_level=True),
        _OTHER.c.disabled_at.is_(None),
        _OTHER.c.kind.in_(words((PrincipalKind.HUMAN, PrincipalKind.ADMIN))),
        ~select(RESP.c.principal_id)
        .where(RESP.c.interaction_id == INTER.c.id, RESP.c.principal_id == _OTHER.c.id)
        .exists(),
    )
    return select(func.count()).select_from(_OTHER).where(on_target).scalar_subquery()


# Read after the step's lock is held (a new statement, so a new snapshot): the interaction as it is now,
# the caller's own response if any, and the tallies.
@cache
def _state() -> Any:
    return (
        interaction_read(bindparam("pid"))
        .add_columns(
            STEP.c.continuation.label("step_continuation"),
            _count().label("responses"),
            _count(RESP.c.approved.is_(True)).label("approvals"),
            _MINE.c.response_id.label("my_response_id"),
            _MINE.c.response_digest.label("my_digest"),
            _MINE.c.status.label("my_status"),
            _MINE.c.at.label("my_at"),
        )
        .join(STEP, STEP.c.id == INTER.c.step_id)
        .outerjoin(_MINE, and_(_MINE.c.interaction_id == INTER.c.id, _MINE.c.principal_id == bindparam("pid")))
    )


@cache
def _others_could_still_answer() -> Any:
    return select(_could_still_answer()).where(INTER.c.id == bindparam("iid"))


@cache
def _record_response() -> Any:
    return insert(RESP)


@cache
def _keep_sealed() -> Any:
    return (
        update(INTER)
        .where(INTER.c.id == bindparam("iid"), INTER.c.status == word(InteractionStatus.PENDING))
        .values(secret=bp("sealed", INTER.c.secret))
    )


def answer(
    session: Executor,
    interaction_id_: str,
    *,
    value: Any,
    response_id: str,
    response_digest: str,
    principal: Caller,
) -> AnswerReceipt | None:
    """An answer, by a ``principal`` (a name, an ``Actor`` or a ``TokenHolder``: found in the answer's call,
    and refused before all else when no live principal is, as ``read_interaction``); ``NotFound``, then
    ``WrongKind``/``Forbidden`` (as ``authorize``) come before anything is written. ``answer_at_once``,
    or ``respond`` for a quorum wait: that needs the step's lock its call took, so a transaction; on a
    connection in autocommit, ``None`` (answer again in a transaction)."""
    got = answer_at_once(session, interaction_id_, principal, value, response_id, response_digest)
    if isinstance(got, AnswerReceipt):
        return got
    if in_autocommit(session):
        return None
    return respond(session, interaction_id_, got[1], value, response_id, response_digest)


def respond(
    session: Executor, interaction_id: str, principal: Actor, value: Any, response_id: str, digest: str
) -> AnswerReceipt:
    """One principal's response to a quorum wait, in the place it holds as read under the step's lock (none:
    ``Forbidden``, its place delegated away meanwhile): recorded once (an exact retry -> the same receipt;
    the same principal with another ``response_id`` or value -> ``Conflict``); the response that reaches
    the quorum, or rejects, closes the interaction (receipt ``answered``/``rejected``, ``continuation`` set
    when the step became due); others leave it ``pending``. After the decision, ``Conflict`` naming it."""
    now = utcnow()
    state = session.execute(_state(), {"iid": interaction_id, "pid": principal.id}).one()
    if state.my_response_id is not None:
        if (state.my_response_id, state.my_digest) == (response_id, digest):
            return AnswerReceipt(state.my_status, response_id, state.my_at)
        raise Conflict(
            f"principal {principal.name} already responded to interaction {interaction_id} (response"
            f" {state.my_response_id}); a principal responds once",
            interaction_state(state),
        )
    _still_open(state)
    authorize(state, principal, "answer")
    answers.validate_value(state, value)
    clear, sealed = answers.seal_value(state, value)
    approved = bool(value.get("approved")) if state.kind == InteractionKind.PERMISSION else None
    status = _decided(session, state, approved)
    session.execute(_record_response(), {"interaction_id": state.id, "principal_id": principal.id,
                                         "place_id": state.place, "response_id": response_id,
                                         "response_digest": digest, "value": clear, "approved": approved,
                                         "status": status.value, "level": state.level, "at": now})  # fmt: skip
    # Every response's sealed fields, by principal, in the interaction's one sealed value: erased with it.
    kept = json.loads(state.secret) if state.secret else {}
    sealed_all = json.dumps({**kept, principal.id: sealed}) if sealed is not None else state.secret
    progress = {"responses": state.responses + 1, "quorum": state.quorum}
    if status == InteractionStatus.PENDING:
        session.execute(_keep_sealed(), {"iid": state.id, "sealed": sealed_all})
        append_events(session, [event_row(state.run_id, "interaction.responded", interaction_id=state.id,
                                           step_id=state.step_id, key=state.key, kind=state.kind,
                                           target=state.target, principal=principal.name,
                                           level=state.level, **progress)])  # fmt: skip
        return AnswerReceipt(status.value, response_id, now)
    decision = Decision(status, clear, sealed_all, response_id, digest, now)
    if close(session, state, principal, decision, **progress) is None:  # pragma: no cover - the lock is held
        raise Conflict(f"interaction {state.id} was closed concurrently", interaction_state(state))
    return AnswerReceipt(status.value, response_id, now, decision.due)


def _still_open(state: Row[Any]) -> None:
    """Raise what ended the wait: ``Conflict`` naming the decision and who made it, or ``Gone``."""
    if state.status in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED):
        raise Conflict(
            f"interaction {state.id} was already {state.status} by {state.answered_by}"
            f" ({state.responses} of {state.quorum} responses)",
            interaction_state(state),
        )
    if state.status != InteractionStatus.PENDING:
        raise Gone(f"interaction {state.id} is {state.status}; it can no longer be answered", interaction_state(state))
    refuse_ended_wait(state)


def _decided(session: Executor, state: Row[Any], approved: bool | None) -> InteractionStatus:
    """The interaction's status after this response: ``answered`` at the quorum-th approval (or response,
    for a question); ``rejected`` at a rejection (policy ``first``), or once the approvals still possible
    cannot reach the quorum (``unreachable``); else still ``pending``."""
    if approved is None:
        return InteractionStatus.ANSWERED if state.responses + 1 >= state.quorum else InteractionStatus.PENDING
    if approved:
        return InteractionStatus.ANSWERED if state.approvals + 1 >= state.quorum else InteractionStatus.PENDING
    if (state.team or {}).get("reject", "first") == "first":
        return InteractionStatus.REJECTED
    # This principal has not responded yet, so it is among those counted: the others are one fewer.
    others = session.execute(_others_could_still_answer(), {"iid": state.id}).scalar_one() - 1
    return InteractionStatus.REJECTED if state.approvals + others < state.quorum else InteractionStatus.PENDING
