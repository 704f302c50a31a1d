"""What the HTTP API and the pages read of a wait's team (docs/teams.md): its responses, the principals it
names and its delegations. Nothing here writes state; values are read as stored (the caller redacts)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from models.status import AnswererSource, InteractionStatus
from models.tables import Principal
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


def naming(principal_id: str) -> Any:
    """The ids of the waits that name ``principal_id`` as an answerer (any source, any level)."""
    return select(InteractionAnswerer.interaction_id).where(InteractionAnswerer.principal_id == principal_id)
