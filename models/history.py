"""Reads for the run history pages (``/runs``, ``/runs/{id}``): a caller's runs, and one run's whole story.

Nothing here writes state. Visibility is the API's (``models.access``): a run and its events are visible to
whoever holds a live grant on its target (admins: all), an interaction to whoever may read it over the API.
Nothing read here carries a sealed value: interaction values go through ``access.public_value``, and step
payloads, snapshots and tool-call arguments or outcomes are not read at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, literal, select
from sqlalchemy.orm import Session, aliased

from models import access, event_log, event_reads, fleet, paging, team_views
from models.access import InteractionView, Page
from models.cursors import position_cursor, read_placed_position, read_position, read_ranked_position
from models.status import InteractionStatus, PrincipalKind
from models.tables import Event, Grant, Interaction, Principal, Review, Run, Step, ToolCall

EVENT_LIMIT = 1000  # a run's page shows at most this many events; the rest is a link to the API


@dataclass(frozen=True)
class RunLine:
    """One row of ``/runs``."""

    run: Run
    owner: str
    pending: int  # interactions still waiting for someone


@dataclass(frozen=True)
class Answered:
    """An interaction of the run as the caller may see it: who answered or closed it, and when."""

    interaction: Interaction
    answered_by: str | None
    closed_by: str | None
    value: Any  # ``access.public_value``: sensitive fields "***"

    @property
    def decision(self) -> str:
        """A permission reads approved or rejected; everything else its status."""
        i = self.interaction
        if i.kind == "permission" and i.status == InteractionStatus.ANSWERED:
            return "approved"
        return str(i.status)


@dataclass(frozen=True)
class History:
    """One run's story: the run, its steps, the interactions the caller may see, tool calls, reviews and
    its events up to ``cursor`` (every event at or below it is final; a stream resumes after it)."""

    run: Run
    owner: str
    steps: list[Step]
    interactions: list[Answered]
    tool_calls: list[ToolCall]
    reviews: list[Review]
    events: list[Event]
    cursor: int
    more_events: bool
    unserved: list[str]  # the versions its waits resume that no live worker runs now


def list_runs(
    session: Session,
    principal: Principal,
    *,
    status: str | None,
    workflow: str | None,
    cursor: str | None,
    limit: int,
    target: str | None = None,
) -> Page[RunLine]:
    """Runs the caller may read, newest first, ``limit`` at a time; ``status``, ``workflow`` and ``target``
    filter exactly. A cursor is one ``next`` of an earlier page (``cursors.InvalidCursor`` otherwise)."""
    pending = (
        select(func.count())
        .where(Interaction.run_id == Run.id, Interaction.status == InteractionStatus.PENDING)
        .correlate(Run)
        .scalar_subquery()
    )
    where = [*([Run.status == status] if status else []), *([Run.workflow == workflow] if workflow else [])]
    targets = None if principal.kind == PrincipalKind.ADMIN else access.live_targets(principal)
    if target is not None:  # one range of the target's index, if the caller may read it
        targets = select(literal(target)) if targets is None else targets.where(Grant.target == target)
    before = read_position(cursor) if cursor is not None else None
    keys = paging.run_keys(where, targets=targets, before=before, n=limit + 1)
    rows = session.execute(
        select(Run, Principal.name, pending)
        .join(keys, keys.c.id == Run.id)
        .join(Principal, Principal.id == Run.owner_id)
        .order_by(Run.created_at.desc(), Run.id.desc())
    ).all()
    items = [RunLine(row[0], row[1], int(row[2])) for row in rows[:limit]]
    last = items[-1].run if len(rows) > limit and items else None
    return Page(items, position_cursor(last.created_at, last.id) if last is not None else None)


def run_history(session: Session, principal: Principal, run_id: str) -> History:
    """Everything ``/runs/{id}`` shows of a run the caller may read (the caller checks that first: a run
    is never deleted, so one seen there is read here)."""
    cursor = event_log.stream_cursor(session)  # read first: events after it reach the page by its stream
    run = session.get_one(Run, run_id)
    owner = session.scalar(select(Principal.name).where(Principal.id == run.owner_id)) or ""
    events = list(
        session.scalars(
            select(Event)
            .where(Event.run_id == run.id, event_reads.through(cursor))
            .order_by(*event_reads.IN_ORDER)
            .limit(EVENT_LIMIT + 1)
        )
    )
    return History(
        run=run,
        owner=owner,
        steps=list(session.scalars(select(Step).where(Step.run_id == run.id).order_by(Step.seq))),
        interactions=interactions(session, principal, run.id),
        tool_calls=list(
            session.scalars(select(ToolCall).where(ToolCall.run_id == run.id).order_by(ToolCall.created_at))
        ),
        reviews=list(session.scalars(select(Review).where(Review.run_id == run.id).order_by(Review.created_at))),
        events=events[:EVENT_LIMIT],
        cursor=cursor,
        more_events=len(events) > EVENT_LIMIT,
        unserved=fleet.unserved_versions(session, run.id),
    )


def interactions(session: Session, principal: Principal, run_id: str) -> list[Answered]:
    """The run's interactions the caller may read, in the order they were asked."""
    answerer, closer = aliased(Principal), aliased(Principal)
    rows = session.execute(
        select(Interaction, answerer.name, closer.name)
        .join(Run, Run.id == Interaction.run_id)
        .outerjoin(answerer, answerer.id == Interaction.answered_by_id)
        .outerjoin(closer, closer.id == Interaction.closed_by_id)
        .where(Interaction.run_id == run_id, access.interaction_visible(principal))
        .order_by(*access.LISTED_ORDER)
    ).all()
    return [Answered(row[0], row[1], row[2], access.public_value(row[0])) for row in rows]


def events_after(session: Session, run_id: str, *, after: int, limit: int = EVENT_LIMIT) -> list[Event]:
    """The run's final events after ``after``, in order: what a live page appends to its timeline."""
    return event_log.run_events(session, run_id, after=after, limit=limit).items


# --------------------------------------------------------------------------- the Decisions inbox


def my_targets(session: Session, principal: Principal) -> set[str]:
    """The targets the caller holds a live grant on ("for me" on the Decisions page)."""
    return set(
        session.scalars(select(Grant.target).where(Grant.principal_id == principal.id, Grant.revoked_at.is_(None)))
    )


def pending(
    session: Session,
    principal: Principal,
    *,
    mine: bool,
    run_id: str | None = None,
    cursor: str | None = None,
    limit: int,
) -> Page[InteractionView]:
    """Pending interactions the caller may read, oldest first. ``mine``: only those for the caller: what
    names the caller first (an assignee, a delegate, a named escalation level reached; ``names_me``), then
    what their live grants give them (a granted target, an escalation to one); an admin sees every other
    one only when asking for all. Read as ``access.list_interactions`` reads them: a page per granted
    target, one of the waits that name the caller, or of all, merged."""
    live = access.live_targets(principal)
    where = [Interaction.run_id == run_id] if run_id is not None else []
    if mine and principal.kind in (PrincipalKind.HUMAN, PrincipalKind.ADMIN):
        return access.interaction_page(session, _for_me_first(principal, run_id, cursor, limit + 1), limit)
    after = read_placed_position(cursor) if cursor is not None else None

    def keys(where: list[Any], targets: Any, of_runs: bool = False) -> Any:
        return paging.interaction_keys(where, targets=targets, status=InteractionStatus.PENDING, after=after,
                                       n=limit + 1, of_runs=of_runs, one_run=run_id is not None)  # fmt: skip

    if principal.kind == PrincipalKind.ADMIN:
        page = keys(where, None)
    elif principal.kind == PrincipalKind.HUMAN:  # its granted targets, and what names it or escalates to them
        named = [paging.answerer_keys(where, **by, status=InteractionStatus.PENDING, after=after, n=limit + 1)
                 for by in team_views.naming_pages(principal.id, live)]  # fmt: skip
        page = paging.merged_keys([keys(where, live), *named], limit + 1)
    elif principal.kind == PrincipalKind.AGENT and not mine:  # and its own runs' while granted on their target
        owned = keys([*where, Run.owner_id == principal.id, Run.target.in_(live)], None, of_runs=True)
        page = paging.merged_keys([keys(where, live), owned], limit + 1)
    else:
        page = keys(where, live)
    return access.interaction_page(session, page, limit)


def _for_me_first(principal: Principal, run_id: str | None, cursor: str | None, n: int) -> Any:
    """The first ``n`` keys of a person's "mine" view (``paging.ranked_keys``): rank 0, the pending waits
    that name them; rank 1, those of their granted targets or escalated to one that do not. A cursor of
    rank 1 resumes there: nothing of rank 0 is left."""
    rank, after = read_ranked_position(cursor) if cursor is not None else (0, None)
    live, pending = access.live_targets(principal), InteractionStatus.PENDING
    where = [Interaction.run_id == run_id] if run_id is not None else []
    pages = []
    if rank == 0:
        named = paging.answerer_keys(where, principal_id=principal.id, status=pending, after=after, n=n)
        pages.append((0, named))
    rest, rest_after = [*where, ~team_views.naming(principal.id)], after if rank == 1 else None
    granted = paging.interaction_keys(rest, targets=live, status=pending, after=rest_after, n=n,
                                      one_run=run_id is not None)  # fmt: skip
    escalated = paging.answerer_keys(rest, targets=live, status=pending, after=rest_after, n=n)
    pages.append((1, paging.merged_keys([granted, escalated], n)))
    return paging.ranked_keys(pages, n)


def cancel_via(session: Session, principal: Principal, run_id: str) -> str | None:
    """The interaction through which "Cancel run" cancels: a pending one the caller may read (canceling
    it cancels its step and the run), else the latest one, whose outcome then says why not; ``None``
    when the caller may read none of the run's interactions."""
    return session.scalar(
        select(Interaction.id)
        .join(Run, Run.id == Interaction.run_id)
        .where(Interaction.run_id == run_id, access.interaction_visible(principal))
        .order_by((Interaction.status == InteractionStatus.PENDING).desc(), Interaction.created_at.desc())
        .limit(1)
    )
