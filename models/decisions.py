"""The decision record (docs/operations.md): one record per decided wait, who decided what, at which level,
with every response; sensitive fields as ``"***"``. Read here; sealed with the event log
(``models.store.seals``: a record is part of the entry of the event that closed its wait), so a record is
built the same way when it is sealed, exported and verified. Nothing here writes state.

The record is read by ``ix_interactions_decided`` (``closed_at``, ``id``; per target:
``ix_interactions_decided_target``), a page at a time, each page in a transaction of its own: an export of a
million waits streams in bounded memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

from sqlalchemy import ColumnElement, String, literal, select, true, tuple_
from sqlalchemy.orm import Session, aliased

from models import event_reads, links, team_views
from models.access import CLOSED_EVENT_TYPES, InteractionView, redacted
from models.status import InteractionKind, InteractionStatus
from models.tables import Event, Grant, Interaction, Principal, Run
from parkway.db import transaction

PAGE = 500
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]|$)")
EXPIRED = "not decided before it expired"


@cache
def _answerer_and_closer() -> tuple[Any, Any]:
    """Who answered a wait and who closed it, as aliases of ``Principal`` made at their first use (an ORM
    alias configures every mapper)."""
    return aliased(Principal), aliased(Principal)


@cache
def _closing_seq() -> Any:
    return (
        select(Event.seq)
        .where(
            Event.run_id == Interaction.run_id,
            Event.type.in_(CLOSED_EVENT_TYPES),
            Event.data["interaction_id"].as_string() == Interaction.id,
        )
        .order_by(*event_reads.IN_ORDER)
        .limit(1)
        .correlate(Interaction)
        .scalar_subquery()
    )


def records(session: Session, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The decision record of each decided wait of ``ids``, by id: its row, and its responses with the place
    each was made in as the API shows them (``team_views.fill``), a few reads for the whole list."""
    if not ids:
        return {}
    answerer, closer = _answerer_and_closer()
    rows = session.execute(
        select(Interaction, Run.workflow, answerer.name, closer.name, _closing_seq())
        .join(Run, Run.id == Interaction.run_id)
        .outerjoin(answerer, answerer.id == Interaction.answered_by_id)
        .outerjoin(closer, closer.id == Interaction.closed_by_id)
        .where(Interaction.id.in_(ids), Interaction.closed_at.is_not(None))
    ).all()
    views = team_views.fill(session, [InteractionView(row[0], row[2]) for row in rows])
    why = links.justifications(session, [view.interaction.id for view in views])
    return {
        view.interaction.id: _record(view.interaction, workflow=row[1], decided_by=row[2] or row[3], seq=row[4],
                                     responses=[_response(view.interaction, r, why) for r in view.responses])
        for row, view in zip(rows, views, strict=True)
    }  # fmt: skip


def _response(i: Interaction, made: team_views.ResponseView, why: dict[tuple[str, str], str]) -> dict[str, Any]:
    """One response: who, in whose place (``for``: null in their own), its verdict, its justification (given
    through an approval link; null otherwise: ``links.justifications``) and redacted value."""
    if i.kind == InteractionKind.PERMISSION:
        verdict = "approved" if isinstance(made.value, dict) and made.value.get("approved") is True else "rejected"
    else:
        verdict = "answered"
    return {"principal": made.principal, "for": None if made.place == made.principal else made.place,
            "justification": why.get((i.id, made.principal)), "level": made.level, "verdict": verdict,
            "value": redacted(i, made.value), "at": made.at.isoformat()}  # fmt: skip


def _record(i: Interaction, *, workflow: str, decided_by: str | None, seq: int | None,
            responses: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    assert i.closed_at is not None
    reason = i.reason or (EXPIRED if i.status == InteractionStatus.EXPIRED else None)
    return {
        "interaction_id": i.id, "run_id": i.run_id, "workflow": workflow, "step_id": i.step_id, "key": i.key,
        "kind": i.kind, "prompt": i.prompt, "action": i.action, "resources": i.resources, "target": i.target,
        "quorum": i.quorum, "status": i.status, "level": i.level, "decided_by": decided_by,
        "asked_at": i.created_at.isoformat(), "decided_at": i.closed_at.isoformat(),
        "expires_at": i.expires_at.isoformat() if i.expires_at else None, "reason": reason,
        "responses": responses, "seq": seq,
    }  # fmt: skip


@dataclass(frozen=True)
class Span:
    """Which decisions an export holds: decided in ``[since, until)``, on ``target`` (``None``: any)."""

    since: datetime | None = None
    until: datetime | None = None
    target: str | None = None

    @staticmethod
    def instant(text: str) -> datetime:
        """An end of a span as a person writes it: an ISO 8601 date or date-time (``2026-12-01``,
        ``2026-12-01T09:30``, ``…Z``, ``…+01:00``), UTC unless it says. A bare number is refused, not read as
        Unix time: the API's schema says a date-time, and so does the CLI's help."""
        if not isinstance(text, str) or not _ISO_DATE.match(text):
            raise ValueError("an ISO 8601 date or date-time such as 2026-12-01T09:30:00Z")
        at = datetime.fromisoformat(text)
        return at.replace(tzinfo=UTC) if at.tzinfo is None else at

    def header(self) -> dict[str, Any]:
        times = {k: v.isoformat() if v else None for k, v in (("since", self.since), ("until", self.until))}
        return {**times, "target": self.target}


def decided(targets: Any | None, span: Span) -> Iterator[dict[str, Any]]:
    """The records of the waits decided in ``span`` on ``targets`` (``access.decision_targets``: a select of
    target names, or ``None`` for every target), in the order they were decided, ``PAGE`` at a time, each
    page in its own transaction."""
    after: tuple[datetime, str] | None = None
    while True:
        with transaction() as session:
            page = session.execute(_page(targets, span, after)).all()
            found = records(session, [row.id for row in page])
        yield from (found[row.id] for row in page if row.id in found)
        if len(page) < PAGE:
            return
        after = (page[-1].closed_at, page[-1].id)


def _page(targets: Any | None, span: Span, after: tuple[datetime, str] | None) -> Any:
    """The next ``PAGE`` decided waits after ``after``: on every target, a range of ``ix_interactions_decided``;
    else the first ``PAGE`` of each target's range of ``ix_interactions_decided_target``, merged (a sort of
    at most ``PAGE`` rows a target, never of every decided wait)."""
    i = Interaction
    where: list[ColumnElement[bool]] = [i.closed_at.is_not(None)]
    where += [i.closed_at >= span.since] if span.since is not None else []
    where += [i.closed_at < span.until] if span.until is not None else []
    where += [tuple_(i.closed_at, i.id) > tuple_(*after)] if after else []
    if span.target is not None:
        one = select(literal(span.target, String).label("target"))
        targets = one if targets is None else targets.where(Grant.target == span.target)
    if targets is None:
        return select(i.id, i.closed_at).where(*where).order_by(i.closed_at, i.id).limit(PAGE)
    named = targets.subquery("named")
    first = (
        select(i.id, i.closed_at).where(i.target == named.c.target, *where)
        .order_by(i.closed_at, i.id).limit(PAGE).lateral("first")
    )  # fmt: skip
    return (
        select(first.c.id, first.c.closed_at).select_from(named).join(first, true())
        .order_by(first.c.closed_at, first.c.id).limit(PAGE)
    )  # fmt: skip
