"""Who may answer a wait beyond the grants on its target (docs/teams.md): its assignees and escalation
levels, written with its park, and delegations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, insert, literal, select

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
    refuse_ended_wait,
)
from models.store.principals import Actor, live_named
from models.store.sql import ANSWERER, PRIN, Executor, word, words
from parkway.errors import Conflict, Gone, InvalidDelegation, NotFound

_PEOPLE = (PRIN.c.disabled_at.is_(None), PRIN.c.kind.in_(words((PrincipalKind.HUMAN, PrincipalKind.ADMIN))))


def _named_rows(iid: str, source: AnswererSource, level: int, names: Sequence[str]) -> Any:
    """Answerer rows for the live people of ``names`` (the park checked them just before)."""
    return select(
        literal(iid), literal(source.value), literal(level), PRIN.c.id, literal(None, ANSWERER.c.target.type),
        literal(utcnow(), ANSWERER.c.at.type),
    ).where(PRIN.c.name.in_(list(names)), *_PEOPLE)  # fmt: skip


_COLUMNS = ["interaction_id", "source", "level", "principal_id", "target", "at"]


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
    """A delegation as recorded: who may now answer, who handed it over and when."""

    interaction_id: str
    to: str
    by: str
    note: str | None
    at: datetime


_LOCKED = InteractionRead(lambda principal_id: locking(interaction_read(principal_id)))
_DELEGATE = (
    select(PRIN.c.id, PRIN.c.name, PRIN.c.kind)
    .where(live_named(PRIN))
    .add_columns(
        select(ANSWERER.c.at)
        .where(ANSWERER.c.interaction_id == bindparam("iid"), ANSWERER.c.principal_id == PRIN.c.id,
               ANSWERER.c.source == word(AnswererSource.DELEGATE))
        .limit(1)
        .scalar_subquery()
        .label("delegated_at")
    )
)  # fmt: skip


def delegate(session: Executor, interaction_id: str, *, principal: Actor, to: str, note: str | None) -> Delegation:
    """A pending wait handed to the live person ``to`` as well (an answerer row, source ``delegate``, and
    ``interaction.delegated``), by one who may answer it, or by an admin (a reassignment); the delegator
    keeps access. Again to the same delegate: the delegation recorded first. Raises ``InvalidDelegation``
    (to oneself, or to a principal who could never answer: unknown, disabled, an agent), and as an answer
    does for who may act and for a wait that ended (``Conflict``, ``Gone``)."""
    found = _LOCKED.by_id.first(session, {"iid": interaction_id, "pid": principal.id})
    if found is None:
        raise NotFound(f"interaction {interaction_id} does not exist")
    if principal.kind != PrincipalKind.ADMIN:
        authorize(found, principal, "answer")
    if to == principal.name:
        raise InvalidDelegation(f"principal {to} cannot delegate interaction {interaction_id} to itself")
    target = session.execute(_DELEGATE, {"pname": to, "iid": interaction_id}).first()
    if target is None or target.kind not in (PrincipalKind.HUMAN, PrincipalKind.ADMIN):
        raise InvalidDelegation(f"principal {to} is not a live human or admin: it could never answer")
    if found.status != InteractionStatus.PENDING:
        closed = found.status in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED)
        raise (Conflict if closed else Gone)(
            f"interaction {interaction_id} is {found.status}; it can no longer be delegated", interaction_state(found)
        )
    refuse_ended_wait(found)
    if target.delegated_at is not None:
        return Delegation(interaction_id, to, principal.name, note, target.delegated_at)
    now = utcnow()
    session.execute(
        insert(ANSWERER).values(
            interaction_id=interaction_id,
            source=AnswererSource.DELEGATE.value,
            level=0,
            principal_id=target.id,
            by_id=principal.id,
            note=note,
            at=now,
        )
    )
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
    return Delegation(interaction_id, to, principal.name, note, now)  # fmt: skip
