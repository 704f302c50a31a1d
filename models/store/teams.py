"""Who may answer a wait beyond the grants on its target (docs/teams.md): its assignees and escalation
levels, written with its park, and delegations: each the move of one place (``place_of``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Row, and_, bindparam, exists, insert, literal, or_, select

from models.base import utcnow
from models.outcome import InteractionSpec
from models.status import AnswererSource, InteractionStatus, PrincipalKind
from models.store.events import append_events, event_row
from models.store.interactions import (
    InteractionRead,
    authorize,
    interaction_read,
    interaction_state,
    locking,
    place_of,
    refuse_ended_wait,
    stands,
)
from models.store.principals import Actor, live_named
from models.store.sql import ANSWERER, INTER, PRIN, RESP, Executor, bp, word, words
from parkway.errors import Conflict, Gone, InvalidDelegation, NotFound

_PEOPLE = (PRIN.c.disabled_at.is_(None), PRIN.c.kind.in_(words((PrincipalKind.HUMAN, PrincipalKind.ADMIN))))


def _named_rows(iid: str, source: AnswererSource, level: int, names: Sequence[str]) -> Any:
    """Answerer rows for the live people of ``names`` (the park checked them just before)."""
    return select(
        literal(iid), literal(source.value), literal(level), PRIN.c.id, literal(None, ANSWERER.c.target.type),
        literal(utcnow(), ANSWERER.c.at.type),
    ).where(PRIN.c.name.in_(list(names)), *_PEOPLE)  # fmt: skip


_COLUMNS = ["interaction_id", "source", "level", "principal_id", "target", "at"]
_DELEGATE_WORD = word(AnswererSource.DELEGATE)


def name_answerers(session: Executor, step_id: str, specs: Sequence[InteractionSpec]) -> None:
    """none -> the answerer rows of a step's new waits: each assignee (from the start, level 0) and each
    escalation level k (a target, or named people; answerable once the wait's level reaches k). Written in
    the park's transaction; nothing for waits without these options (no statement at all)."""
    for spec in specs:
        iid = spec.interaction_id(step_id)
        if spec.assignees:
            session.execute(insert(ANSWERER).from_select(
                _COLUMNS, _named_rows(iid, AnswererSource.ASSIGNEE, 0, spec.assignees)))  # fmt: skip
        for level, (_, to) in enumerate(spec.escalate, start=1):
            if isinstance(to, str):
                session.execute(insert(ANSWERER).values(interaction_id=iid, source=AnswererSource.ESCALATION.value,
                                                        level=level, target=to, at=utcnow()))  # fmt: skip
            else:
                session.execute(insert(ANSWERER).from_select(
                    _COLUMNS, _named_rows(iid, AnswererSource.ESCALATION, level, to)))  # fmt: skip


@dataclass(frozen=True)
class Delegation:
    """A delegation as recorded: who holds the place now, who handed it over, whose place it is, and when."""

    interaction_id: str
    to: str
    by: str
    note: str | None
    at: datetime
    place: str  # whose place it first was (the delegator's own, or one delegated to it before)


def _responded(principal_id: Any) -> Any:
    return exists().where(RESP.c.interaction_id == INTER.c.id, RESP.c.principal_id == principal_id)


def _read(principal_id: Any) -> Any:
    """``interaction_read``, and whether the principal responded to it."""
    return interaction_read(principal_id).add_columns(_responded(principal_id).label("responded"))


_READ, _LOCKED = InteractionRead(_read), InteractionRead(lambda principal_id: locking(_read(principal_id)))
_PLACE, _AGAIN, _AGAIN_PLACE = PRIN.alias("place"), ANSWERER.alias("again"), PRIN.alias("again_place")
_OF_THE_PLACE = and_(ANSWERER.c.interaction_id == bindparam("iid"), ANSWERER.c.place_id == bindparam("place"))


# The delegate named ``:pname`` (live), whether it held the place ``:place`` before (its own, or moved to it:
# a move to it would close a cycle), and the caller's ``:pid`` delegation to it that still stands, if any.
@cache
def _delegate() -> Any:
    return (
        select(PRIN.c.id, PRIN.c.name, PRIN.c.kind,
               select(_PLACE.c.name).where(_PLACE.c.id == bindparam("place")).scalar_subquery().label("place_name"),
               or_(PRIN.c.id == bindparam("place"),
                   exists().where(_OF_THE_PLACE, ANSWERER.c.principal_id == PRIN.c.id)).label("held"),
               _AGAIN.c.at.label("again_at"), _AGAIN.c.note.label("again_note"), _AGAIN_PLACE.c.name.label("again_for"))
        .select_from(
            PRIN.outerjoin(_AGAIN, and_(_AGAIN.c.interaction_id == bindparam("iid"), _AGAIN.c.by_id == bindparam("pid"),
                                        _AGAIN.c.principal_id == PRIN.c.id, _AGAIN.c.place_id.is_not(None),
                                        stands(_AGAIN)))
            .outerjoin(_AGAIN_PLACE, _AGAIN_PLACE.c.id == _AGAIN.c.place_id)
        )
        .where(live_named(PRIN))
        .limit(1)
    )  # fmt: skip


# The move itself, a compare-and-set: only while the wait is pending, the caller ``:pid`` still holds the
# place ``:place`` (``place_of``) and has not responded.
@cache
def _move() -> Any:
    return (
        insert(ANSWERER)
        .from_select(
            ["interaction_id", "source", "level", "principal_id", "by_id", "place_id", "note", "at"],
            select(INTER.c.id, _DELEGATE_WORD, literal(0), *(bp(name, ANSWERER.c[column]) for name, column in (
                ("to", "principal_id"), ("pid", "by_id"), ("place", "place_id"), ("note", "note"), ("at", "at"))))
            .where(INTER.c.id == bindparam("iid"), INTER.c.status == word(InteractionStatus.PENDING),
                   place_of(bindparam("pid")) == bindparam("place"), ~_responded(bindparam("pid"))),
        )
        .returning(ANSWERER.c.id)
    )  # fmt: skip


def delegate(session: Executor, interaction_id: str, *, principal: Actor, to: str, note: str | None) -> Delegation:
    """A place moved: the place the caller holds on a pending wait (``place_of``) moves to the live person
    ``to`` (an answerer row, source ``delegate``, and ``interaction.delegated``); the caller holds it no more.
    Again to the same delegate while that move stands: the delegation recorded first. Raises ``Forbidden``
    for a caller who holds no place (as an answer does), ``Conflict`` for one who responded already,
    ``Conflict``/``Gone`` for a wait that ended, and ``InvalidDelegation`` to oneself, to a principal who
    could never answer (unknown, disabled, an agent) or to one who held that place before (a cycle).

    Three statements: the read that takes the step's lock, the delegate's, then the move (a compare-and-set:
    the read's snapshot predates its wait for the lock, so what committed meanwhile is read again, and
    said, when the move loses)."""
    found = _LOCKED.by_id.first(session, {"iid": interaction_id, "pid": principal.id})
    if found is None:
        raise NotFound(f"interaction {interaction_id} does not exist")
    params = {"iid": interaction_id, "pid": principal.id, "pname": to, "place": found.place}
    target = session.execute(_delegate(), params).first()
    if target is not None and target.again_at is not None:
        _still_pending(found)
        return Delegation(interaction_id, to, principal.name, target.again_note, target.again_at, target.again_for)
    _may_delegate(found, principal)
    if to == principal.name:
        raise InvalidDelegation(f"principal {to} cannot delegate interaction {interaction_id} to itself")
    if target is None or target.kind not in (PrincipalKind.HUMAN, PrincipalKind.ADMIN):
        raise InvalidDelegation(f"principal {to} is not a live human or admin: it could never answer")
    if target.held:
        raise InvalidDelegation(f"principal {to} held this place of interaction {interaction_id} before: a"
                                " delegation never closes a cycle")  # fmt: skip
    now = utcnow()
    if session.execute(_move(), {**params, "to": target.id, "note": note, "at": now}).first() is None:
        again = _READ.by_id.first(session, params)  # the lock is held now: what committed meanwhile shows
        assert again is not None  # an interaction is never deleted
        _may_delegate(again, principal)
        raise Conflict(f"the place principal {principal.name} holds on interaction {interaction_id} changed"
                       " concurrently", interaction_state(again))  # fmt: skip
    append_events(
        session,
        [
            event_row(
                found.run_id,
                "interaction.delegated",
                interaction_id=interaction_id,
                step_id=found.step_id,
                key=found.key,
                kind=found.kind,
                target=found.target,
                by=principal.name,
                to=to,
            )
        ],
    )
    return Delegation(interaction_id, to, principal.name, note, now, target.place_name)


def _may_delegate(found: Row[Any], principal: Actor) -> None:
    """Raise why ``principal`` may not move its place on the interaction ``found`` (a row of ``_READ``): it
    holds none (as ``authorize`` says for an answer), it responded already, or the wait ended."""
    authorize(found, principal, "answer")
    _still_pending(found)
    if found.responded:
        raise Conflict(f"principal {principal.name} responded to interaction {found.id}; a place responded in"
                       " cannot move", interaction_state(found))  # fmt: skip


def _still_pending(found: Row[Any]) -> None:
    if found.status != InteractionStatus.PENDING:
        closed = found.status in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED)
        raise (Conflict if closed else Gone)(
            f"interaction {found.id} is {found.status}; it can no longer be delegated", interaction_state(found)
        )
    refuse_ended_wait(found)
