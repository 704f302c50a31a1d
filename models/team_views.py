"""What the HTTP API and the pages read of a wait's team (docs/teams.md): its responses, the principals it
names and its delegations. Nothing here writes state; values are read as stored (the caller redacts)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Select, and_, exists, false, or_, select
from sqlalchemy.orm import Session, aliased

from models.status import AnswererSource, InteractionStatus
from models.tables import Interaction, Principal
from models.team_tables import InteractionAnswerer, InteractionResponse

if TYPE_CHECKING:
    from models.access import InteractionView


@dataclass(frozen=True)
class ResponseView:
    principal: str
    value: Any  # the clear part as stored: redact before showing
    at: datetime
    level: int


@dataclass(frozen=True)
class DelegationView:
    to: str
    by: str
    note: str | None
    at: datetime


_BY = aliased(Principal)


def fill(session: Session, views: list[InteractionView]) -> list[InteractionView]:
    """Each view's responses (a quorum wait's rows; the one answer of any other), assignees and
    delegations: two reads for the whole list, none for a list without quorum or named answerers."""
    ids = [v.interaction.id for v in views]
    responses: dict[str, list[ResponseView]] = defaultdict(list)
    if any(v.interaction.quorum > 1 for v in views):
        rows = session.execute(
            select(InteractionResponse, Principal.name)
            .join(Principal, Principal.id == InteractionResponse.principal_id)
            .where(InteractionResponse.interaction_id.in_(ids))
            .order_by(InteractionResponse.at)
        )
        for r, name in rows:
            responses[r.interaction_id].append(ResponseView(name, r.value, r.at, r.level))
    named: dict[str, list[tuple[InteractionAnswerer, str | None, str | None]]] = defaultdict(list)
    answerers = session.execute(
        select(InteractionAnswerer, Principal.name, _BY.name)
        .outerjoin(Principal, Principal.id == InteractionAnswerer.principal_id)
        .outerjoin(_BY, _BY.id == InteractionAnswerer.by_id)
        .where(InteractionAnswerer.interaction_id.in_(ids))
        .order_by(InteractionAnswerer.id)
    )
    for a, name, by in answerers:
        named[a.interaction_id].append((a, name, by))
    for view in views:
        i = view.interaction
        view.responses = responses[i.id] if i.quorum > 1 else _the_answer(view)
        rows_of = named[i.id]
        view.assignees = [name for a, name, _ in rows_of if a.source == AnswererSource.ASSIGNEE and name]
        view.delegations = [DelegationView(name or "", by or "", a.note, a.at)
                            for a, name, by in rows_of if a.source == AnswererSource.DELEGATE]  # fmt: skip
    return views


def _the_answer(view: InteractionView) -> list[ResponseView]:
    i = view.interaction
    if i.status not in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED) or view.answered_by is None:
        return []
    assert i.answered_at is not None
    return [ResponseView(view.answered_by, i.value, i.answered_at, i.answered_level or 0)]


_ROWS = InteractionAnswerer.__table__
_NAMING = _ROWS.alias("naming")


def names(principal_id: str | None, targets: Select[Any] | None = None, rows: Any = _ROWS) -> ColumnElement[bool]:
    """SQL condition on an answerer row (of ``rows``) joined with its ``Interaction``: the row names
    ``principal_id`` (an assignee, a delegate, a named escalation level) or a target among ``targets`` (a
    select of the caller's live targets: an escalation to a team), at a level the wait has reached."""
    who: list[ColumnElement[bool]] = []
    if principal_id is not None:
        who.append(rows.c.principal_id == principal_id)
    if targets is not None:
        who.append(rows.c.target.in_(targets))
    return and_(or_(*who) if who else false(), rows.c.level <= Interaction.level)


def naming_pages(principal_id: str, targets: Select[Any]) -> list[dict[str, Any]]:
    """What names the caller, as the two pages a listing reads (``paging.answerer_keys``), each on its own
    index: the rows that name the caller, those that name a target among ``targets``."""
    return [{"principal_id": principal_id}, {"targets": targets}]


def naming(principal_id: str | None, targets: Select[Any] | None = None) -> ColumnElement[bool]:
    """SQL condition on ``Interaction``: a row of its answerers ``names`` the caller (one probe of
    ``ix_interaction_answerers_interaction``)."""
    found = exists().where(_NAMING.c.interaction_id == Interaction.id, names(principal_id, targets, _NAMING))
    return found.correlate_except(_NAMING)
