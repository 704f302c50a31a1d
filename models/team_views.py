"""What the HTTP API and the pages read of a wait's team (docs/teams.md): its responses and the place each
was made in, the principals it names, its delegations, and whether a person holds a place on it. Nothing
here writes state; values are read as stored (the caller redacts)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Select, and_, bindparam, exists, false, or_, select
from sqlalchemy.orm import Session, aliased

from models.status import AnswererSource, InteractionStatus
from models.store.interactions import held_by_delegation, place_of
from models.store.sql import INTER, PRIN
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
    place: str  # in whose place it was made: ``principal`` itself, or whoever delegated that place


@dataclass(frozen=True)
class DelegationView:
    to: str
    by: str
    note: str | None
    at: datetime
    place: str  # whose place it moved


@cache
def _by_and_place() -> tuple[Any, Any]:
    """Who named an answerer and whose place it holds, as aliases of ``Principal`` made at their first use
    (an ORM alias configures every mapper)."""
    return aliased(Principal), aliased(Principal)


def fill(session: Session, views: list[InteractionView]) -> list[InteractionView]:
    """Each view's responses (a quorum wait's rows; the one answer of any other) with the place each was made
    in, assignees and delegations: two reads for the whole list, none for a list without quorum or named
    answerers, and a third when a first-wins wait was decided after a delegation."""
    ids = [v.interaction.id for v in views]
    by_principal, place_principal = _by_and_place()
    responses: dict[str, list[ResponseView]] = defaultdict(list)
    if any(v.interaction.quorum > 1 for v in views):
        rows = session.execute(
            select(InteractionResponse, Principal.name, place_principal.name)
            .join(Principal, Principal.id == InteractionResponse.principal_id)
            .join(place_principal, place_principal.id == InteractionResponse.place_id)
            .where(InteractionResponse.interaction_id.in_(ids))
            .order_by(InteractionResponse.at)
        )
        for r, name, place in rows:
            responses[r.interaction_id].append(ResponseView(name, r.value, r.at, r.level, place))
    named: dict[str, list[tuple[InteractionAnswerer, str | None, str | None, str | None]]] = defaultdict(list)
    answerers = session.execute(
        select(InteractionAnswerer, Principal.name, by_principal.name, place_principal.name)
        .outerjoin(Principal, Principal.id == InteractionAnswerer.principal_id)
        .outerjoin(by_principal, by_principal.id == InteractionAnswerer.by_id)
        .outerjoin(place_principal, place_principal.id == InteractionAnswerer.place_id)
        .where(InteractionAnswerer.interaction_id.in_(ids))
        .order_by(InteractionAnswerer.id)
    )
    for a, name, by, place in answerers:
        named[a.interaction_id].append((a, name, by, place))
    for view in views:
        rows_of = named[view.interaction.id]
        view.assignees = [name for a, name, _, _ in rows_of if a.source == AnswererSource.ASSIGNEE and name]
        view.delegations = [DelegationView(name or "", by or "", a.note, a.at, place or by or "")
                            for a, name, by, place in rows_of if a.source == AnswererSource.DELEGATE]  # fmt: skip
    delegated = [v.interaction.id for v in views if v.delegations and _answered_first(v)]
    places = _answered_for(session, delegated) if delegated else {}
    for view in views:
        i = view.interaction
        view.responses = responses[i.id] if i.quorum > 1 else _the_answer(view, places.get(i.id))
    return views


def _answered_first(view: InteractionView) -> bool:
    """A first-wins wait that was decided: its one answer is the interaction's own."""
    i = view.interaction
    decided = i.status in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED)
    return i.quorum <= 1 and decided and view.answered_by is not None


def _the_answer(view: InteractionView, place: str | None) -> list[ResponseView]:
    """A first-wins wait's one answer as a response, made in ``place`` (``None``: its answerer's own)."""
    if not _answered_first(view) or view.answered_by is None:
        return []
    i = view.interaction
    assert i.answered_at is not None
    return [ResponseView(view.answered_by, i.value, i.answered_at, i.answered_level or 0, place or view.answered_by)]


_IDS = INTER.c.id.in_(bindparam("ids", expanding=True))


@cache
def _answered_for_statement() -> Any:
    return select(
        INTER.c.id, select(PRIN.c.name).where(PRIN.c.id == held_by_delegation(INTER.c.answered_by_id)).scalar_subquery()
    ).where(_IDS)


def _answered_for(session: Session, ids: list[str]) -> dict[str, str]:
    """Whose place each of these decided first-wins waits was answered in, where it was a delegated one: the
    place its answerer held by delegation (``held_by_delegation``; a decided wait's places move no more)."""
    return {iid: place for iid, place in session.execute(_answered_for_statement(), {"ids": ids}) if place is not None}


@cache
def _holds_statement() -> Any:
    return select(INTER.c.id).where(_IDS, place_of(bindparam("pid")).is_not(None))


def holding(session: Session, principal_id: str, ids: list[str]) -> set[str]:
    """Those of the interactions ``ids`` on which ``principal_id`` holds a place (``place_of``): where it
    may answer or delegate."""
    return set(session.scalars(_holds_statement(), {"ids": ids, "pid": principal_id})) if ids else set()


_ROWS = InteractionAnswerer.__table__
_NAMING = _ROWS.alias("naming")


def names(
    principal_id: str | None, targets: Select[Any] | None = None, rows: Any = _ROWS, interaction: Any = Interaction
) -> ColumnElement[bool]:
    """SQL condition on an answerer row (of ``rows``) joined with its ``interaction``: the row names
    ``principal_id`` (an assignee, a delegate, a named escalation level) or a target among ``targets`` (a
    select of the caller's live targets: an escalation to a team), at a level the wait has reached."""
    who: list[ColumnElement[bool]] = []
    if principal_id is not None:
        who.append(rows.c.principal_id == principal_id)
    if targets is not None:
        who.append(rows.c.target.in_(targets))
    return and_(or_(*who) if who else false(), rows.c.level <= interaction.level)


def naming_pages(principal_id: str, targets: Select[Any]) -> list[dict[str, Any]]:
    """What names the caller, as the two pages a listing reads (``paging.answerer_keys``), each on its own
    index: the rows that name the caller, those that name a target among ``targets``."""
    return [{"principal_id": principal_id}, {"targets": targets}]


def naming(principal_id: str | None, targets: Select[Any] | None = None) -> ColumnElement[bool]:
    """SQL condition on ``Interaction``: a row of its answerers ``names`` the caller (one probe of
    ``ix_interaction_answerers_interaction``)."""
    found = exists().where(_NAMING.c.interaction_id == Interaction.id, names(principal_id, targets, _NAMING))
    return found.correlate_except(_NAMING)


@cache
def _named() -> Any:
    """The interaction a caller's answerer row names, as an alias made at its first use."""
    return aliased(Interaction, name="named")


def naming_runs(principal_id: str, targets: Select[Any]) -> Select[Any]:
    """The ids of the runs one of whose waits ``names`` the caller (or a target among ``targets``): their
    pages, events and live updates are the caller's to read (``access.run_visible``). Correlated with
    nothing, so it is read once per statement from the caller's answerer rows (their partial indexes)."""
    interaction = _named()
    named = names(principal_id, targets, _ROWS, interaction)
    rows = select(interaction.run_id).join(_ROWS, _ROWS.c.interaction_id == interaction.id).where(named)
    return rows.correlate(None)


def took_part(principal_id: str, targets: Select[Any]) -> ColumnElement[bool]:
    """SQL condition on ``Interaction``: the caller decided it, responded to it, or it ``naming`` them (what
    "for me" lists of the waits closed: each person's own decisions, whatever the target's grants)."""
    responded = exists().where(
        InteractionResponse.interaction_id == Interaction.id, InteractionResponse.principal_id == principal_id
    )
    return or_(Interaction.answered_by_id == principal_id, responded, naming(principal_id, targets))
