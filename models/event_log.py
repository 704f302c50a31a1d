"""Reads of the event log: which events are final, one run's events, and the stream's events for a caller.

An event is delivered only once final: every transaction that could still write an event below it has
ended (``final_below``), so a reader never moves its cursor past an event still to commit.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_, exists, or_, select, true
from sqlalchemy.orm import Session, aliased

from models import event_reads
from models.access import Page, interaction_visible, run_visible
from models.horizon import final_below
from models.status import PrincipalKind
from models.tables import Event, Interaction, Principal, Run


def run_events(session: Session, run_id: str, *, after: int, limit: int) -> Page[Event]:
    """One run's final events with ``seq > after``, in order, ``limit`` at a time (one statement)."""
    stmt = select(Event).where(Event.run_id == run_id, event_reads.after(after), event_reads.below(final_below()))
    rows = list(session.scalars(stmt.order_by(*event_reads.IN_ORDER).limit(limit + 1)))
    items = rows[:limit]
    return Page(items, str(items[-1].seq) if len(rows) > limit else None)


def visible_events(
    session: Session, principal: Principal, *, after: int, limit: int, run_id: str | None = None
) -> tuple[list[Event], int]:
    """Final events after ``after`` of runs the caller may see now (of one run: ``run_id``, a range of
    ``ix_events_run_seq``), and the cursor to poll from next.

    One statement, so the events and the bound they stop at come from one snapshot: every event at or
    below the cursor returned is final. The cursor moves past events the caller may not see too, so a
    quiet stream does not rescan them.
    """
    below = final_below()
    bound = select(below.label("below")).subquery("bound")
    one_run = [Event.run_id == run_id] if run_id is not None else []
    page = (
        select(Event)
        .join(Run, Run.id == Event.run_id)
        .where(event_reads.after(after), event_reads.below(below), event_visible(principal), *one_run)
        .order_by(*event_reads.IN_ORDER)
        .limit(limit)
        .subquery("page")
    )
    event = aliased(Event, page)
    rows = session.execute(
        select(bound.c.below, event).select_from(bound).outerjoin(page, true()).order_by(page.c.seq)
    ).all()
    events = [row[1] for row in rows if row[1] is not None]
    if len(events) == limit:
        return events, events[-1].seq
    return events, max(after, int(rows[0].below) - 1)


def event_visible(principal: Principal) -> ColumnElement[bool]:
    """SQL condition on ``Event`` joined with its ``Run``: every event of a run the caller may see, and the
    events of an interaction it may read (``interaction.*``, naming it in ``data``; ``access.interaction_visible``:
    granted on its target, or, for a person, named by it), so whoever may answer a prompt follows it live
    even without a grant on its run's target."""
    if principal.kind == PrincipalKind.ADMIN:
        return true()
    of_interaction = exists().where(
        Interaction.id == Event.data["interaction_id"].as_string(), interaction_visible(principal)
    )
    return or_(run_visible(principal), and_(Event.type.startswith("interaction."), of_interaction))


def stream_cursor(session: Session) -> int:
    """The event cursor a stream opened after this read should start from: every event at or below it is
    final, so nothing after it is missed."""
    return int(session.scalar(select(final_below())) or 1) - 1
