"""Reads for the HTTP API: who is calling, what they may see, and pages of runs, interactions and events.

Nothing here writes state. Visibility is decided in SQL against the grants as they are now, so a revoked
grant hides rows at the next request. The rules:

- admins see everything;
- a run is visible to whoever holds a live grant on the run's target (its owner too), and to the people
  one of its waits names (as below: they follow the run they decide on to its end) (its events:
  ``models.event_log``);
- an interaction is visible to whoever holds a live grant on the interaction's target, to the people it
  names (assignees, delegates, escalation levels reached: ``team_views.naming``), to whoever holds a live
  grant on a target an escalation level reached names, and to the agent that owns its run while that
  agent holds a live grant on the run's target;
- approval links to an interaction are handed out by admins, and by the agent that owns its run while it
  holds a live grant on the run's target (``may_hand_out_links``); a link is for a live person holding a
  place on the wait (``models.links``), and acts as that person alone;
- an auditor sees no run, interaction or event: only the decision record of the waits on targets it holds
  a live grant on (``decision_targets``), as an admin sees every decision.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Generic, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    and_,
    bindparam,
    false,
    literal,
    or_,
    select,
    true,
)
from sqlalchemy.orm import Session

from models import fleet, paging, team_views
from models.cursors import position_cursor, ranked_cursor, read_placed_position
from models.event_reads import NEWEST_FIRST
from models.status import InteractionStatus, PrincipalKind
from models.tables import Event, Grant, Interaction, Principal, Review, Run, Step, ToolCall

T = TypeVar("T")

REDACTED = "***"
# How interactions are listed everywhere: oldest first, a step's in the order its Park declared them.
LISTED_ORDER = (Interaction.created_at, Interaction.position, Interaction.id)


@dataclass
class Page(Generic[T]):
    items: list[T]
    next: str | None


@dataclass
class InteractionView:
    interaction: Interaction
    answered_by: str | None
    names_me: bool = False  # "mine": it names the caller (``history.pending``); closed: they took part in it
    # Its team (models/team_views.py ``fill``): empty until filled.
    responses: list[team_views.ResponseView] = field(default_factory=list)
    assignees: list[str] = field(default_factory=list)
    delegations: list[team_views.DelegationView] = field(default_factory=list)


@dataclass
class RunView:
    run: Run
    owner: str
    steps: list[Step]
    open_interactions: list[InteractionView]
    tool_calls: list[ToolCall] = field(default_factory=list)
    reviews: list[Review] = field(default_factory=list)
    unserved: list[str] = field(default_factory=list)  # versions its waits resume that no live worker runs


# --------------------------------------------------------------------------- principals


_P = Principal.__table__.c


@cache
def _principal_by_token_statement() -> Any:
    return select(_P.id, _P.kind, _P.name, _P.token_hash, _P.created_at).where(
        _P.token_hash == bindparam("token_hash"),
        _P.disabled_at.is_(None),  # disabling clears the hash too
    )


def principal_by_token(conn: Connection | Session, token_hash: str) -> Principal | None:
    """The live principal holding this token hash, compared in constant time after the indexed lookup.

    One Core read, meant for a connection in autocommit (``parkway.db.read_statement``: every request is
    authenticated, so no BEGIN and COMMIT and no ORM load). The principal returned belongs to no session;
    only its columns are read from it, as from one loaded by a session already closed."""
    row = conn.execute(_principal_by_token_statement(), {"token_hash": token_hash}).first()
    if row is None or row.token_hash is None or not hmac.compare_digest(row.token_hash, token_hash):
        return None
    return Principal(id=row.id, kind=row.kind, name=row.name, token_hash=row.token_hash, created_at=row.created_at)


def grant_by_id(session: Session, grant_id: str) -> tuple[Grant, str] | None:
    """A grant with its principal's name, revoked or not; ``None`` when it never existed."""
    row = session.execute(
        select(Grant, Principal.name).join(Principal, Principal.id == Grant.principal_id).where(Grant.id == grant_id)
    ).first()
    return (row[0], row[1]) if row is not None else None


# --------------------------------------------------------------------------- visibility


def granted_targets(principal: Principal) -> Any:
    """The targets the principal holds a live grant on."""
    return select(Grant.target).where(Grant.principal_id == principal.id, Grant.revoked_at.is_(None))


def live_targets(principal: Principal) -> Any:
    """The targets whose runs and waits the principal may read: its granted ones (an auditor's grants cover
    decisions only, ``decision_targets``: none)."""
    granted = granted_targets(principal)
    return granted.where(false()) if principal.kind == PrincipalKind.AUDITOR else granted


def run_visible(principal: Principal) -> ColumnElement[bool]:
    """SQL condition on ``Run``: the caller may read this run and its events (granted on its target, or,
    for a person, named by one of its waits: ``team_views.naming_runs``)."""
    if principal.kind == PrincipalKind.ADMIN:
        return true()
    granted = Run.target.in_(live_targets(principal))
    if principal.kind == PrincipalKind.AGENT:
        return granted
    return or_(granted, Run.id.in_(team_views.naming_runs(principal.id, live_targets(principal))))


def interaction_visible(principal: Principal) -> ColumnElement[bool]:
    """SQL condition on ``Interaction`` joined with its ``Run``: the caller may read this interaction."""
    if principal.kind == PrincipalKind.ADMIN:
        return true()
    granted = Interaction.target.in_(live_targets(principal))
    if principal.kind != PrincipalKind.AGENT:
        return or_(granted, team_views.naming(principal.id, live_targets(principal)))
    owns = and_(Run.owner_id == principal.id, Run.target.in_(live_targets(principal)))
    return or_(granted, owns)


def may_hand_out_links(session: Session, principal: Principal, interaction_id: str) -> bool:
    """Whether the caller may hand out approval links to this interaction (``models.links``): an admin, or
    the agent that owns its run while it holds a live grant on the run's target."""
    if principal.kind == PrincipalKind.ADMIN:
        return True
    if principal.kind != PrincipalKind.AGENT:
        return False
    owns = and_(Run.owner_id == principal.id, Run.target.in_(live_targets(principal)))
    found = session.scalar(
        select(Interaction.id).join(Run, Run.id == Interaction.run_id).where(Interaction.id == interaction_id, owns)
    )
    return found is not None


def live_person(session: Session, name: str) -> Principal | None:
    """The live human or admin of this name (whom an approval link may be for), or ``None``."""
    return session.scalar(
        select(Principal).where(
            Principal.name == name,
            Principal.disabled_at.is_(None),
            Principal.kind.in_((PrincipalKind.HUMAN.value, PrincipalKind.ADMIN.value)),
        )
    )


def decision_targets(principal: Principal) -> Any | None:
    """The targets whose waits' decision records the caller may read (``models.decisions``): ``None`` for
    every target (an admin); an auditor's granted ones; none for any other kind."""
    if principal.kind == PrincipalKind.ADMIN:
        return None
    granted = granted_targets(principal)
    return granted if principal.kind == PrincipalKind.AUDITOR else granted.where(false())


def _listed_interactions(principal: Principal) -> ColumnElement[bool]:
    """What ``GET /v1/interactions`` lists: granted targets (humans), own runs (agents), all (admins)."""
    if principal.kind == PrincipalKind.AGENT:
        return and_(Run.owner_id == principal.id, interaction_visible(principal))
    return interaction_visible(principal)


def can_see_run(session: Session, principal: Principal, run_id: str) -> bool:
    found = session.scalar(select(Run.id).where(Run.id == run_id, run_visible(principal)))
    return found is not None


def can_see_interaction(session: Session, principal: Principal, interaction_id: str) -> bool:
    found = session.scalar(
        select(Interaction.id)
        .join(Run, Run.id == Interaction.run_id)
        .where(Interaction.id == interaction_id, interaction_visible(principal))
    )
    return found is not None


# --------------------------------------------------------------------------- runs and interactions


def public_value(interaction: Interaction) -> Any:
    """The answer as readers may see it: ``None`` unless answered; sensitive fields always ``"***"``."""
    if interaction.status not in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED):
        return None
    return redacted(interaction, interaction.value)


def redacted(interaction: Interaction, value: Any) -> Any:
    """A value of the interaction (its answer, or one response) with its sensitive fields as ``"***"``."""
    sensitive = [str(k) for k in (interaction.sensitive or [])]
    if not sensitive:
        return value
    if value is None or isinstance(value, dict):
        # Whether the field is stored in clear, encrypted apart, or already erased: it reads as "***".
        return {**(value or {}), **dict.fromkeys(sensitive, REDACTED)}
    return REDACTED


def get_run(session: Session, run_id: str) -> Run | None:
    return session.get(Run, run_id)


def run_view(session: Session, run: Run) -> RunView:
    """A run with its owner's name, its steps in order and its open (pending) interactions."""
    owner = session.scalar(select(Principal.name).where(Principal.id == run.owner_id)) or ""
    steps = list(session.scalars(select(Step).where(Step.run_id == run.id).order_by(Step.seq)))
    open_interactions = [
        InteractionView(i, None)
        for i in session.scalars(
            select(Interaction)
            .where(Interaction.run_id == run.id, Interaction.status == InteractionStatus.PENDING)
            .order_by(*LISTED_ORDER)
        )
    ]
    return RunView(
        run=run,
        owner=owner,
        steps=steps,
        open_interactions=open_interactions,
        tool_calls=list(
            session.scalars(select(ToolCall).where(ToolCall.run_id == run.id).order_by(ToolCall.created_at))
        ),
        reviews=list(session.scalars(select(Review).where(Review.run_id == run.id).order_by(Review.created_at))),
        unserved=fleet.unserved_versions(session, run.id) if open_interactions else [],
    )


def interaction_view(session: Session, interaction_id: str) -> InteractionView | None:
    row = session.execute(
        select(Interaction, Principal.name)
        .outerjoin(Principal, Principal.id == Interaction.answered_by_id)
        .where(Interaction.id == interaction_id)
    ).first()
    return team_views.fill(session, [InteractionView(row[0], row[1])])[0] if row is not None else None


def run_status_of(session: Session, run_id: str) -> str | None:
    return session.scalar(select(Run.status).where(Run.id == run_id))


def list_interactions(
    session: Session,
    principal: Principal,
    *,
    status: str | None,
    target: str | None,
    run_id: str | None,
    cursor: str | None,
    limit: int,
) -> Page[InteractionView]:
    """Interactions the caller may see, oldest first, ``limit`` at a time: a page per granted target and
    one of the waits that name the caller or are escalated to a granted target (a person), of the
    caller's own runs (an agent) or of all (an admin), merged (``models.paging``)."""
    after = read_placed_position(cursor) if cursor is not None else None
    where: list[ColumnElement[bool]] = [Interaction.run_id == run_id] if run_id is not None else []
    targets = None
    if principal.kind not in (PrincipalKind.ADMIN, PrincipalKind.AGENT):  # a worker's grants: none, unless given
        targets = live_targets(principal) if target is None else live_targets(principal).where(Grant.target == target)
    elif target is not None:
        where.append(Interaction.target == target)
    if principal.kind == PrincipalKind.AGENT:
        where.append(_listed_interactions(principal))
    agent = principal.kind == PrincipalKind.AGENT
    keys = paging.interaction_keys(
        where, targets=targets, status=status, after=after, n=limit + 1, of_runs=agent, one_run=run_id is not None
    )
    if targets is not None:
        named = [*where, *([Interaction.target == target] if target is not None else [])]
        pages = [paging.answerer_keys(named, **by, status=status, after=after, n=limit + 1)
                 for by in team_views.naming_pages(principal.id, live_targets(principal))]  # fmt: skip
        keys = paging.merged_keys([keys, *pages], limit + 1)
    return interaction_page(session, keys, limit)


def interaction_page(session: Session, keys: Any, limit: int) -> Page[InteractionView]:
    """The interactions of ``keys`` (``paging.interaction_keys`` of ``limit + 1``) with who answered each,
    oldest first (keys with a ``rank``, ``paging.ranked_keys``: rank 0 first, marked ``names_me``);
    ``next`` when there are more."""
    rank = keys.c.rank if "rank" in keys.c else literal(None)
    rows = session.execute(
        select(Interaction, Principal.name, rank)
        .join(keys, keys.c.id == Interaction.id)
        .outerjoin(Principal, Principal.id == Interaction.answered_by_id)
        .order_by(*([keys.c.rank] if "rank" in keys.c else []), *LISTED_ORDER)
    ).all()
    items = team_views.fill(session, [InteractionView(r[0], r[1], names_me=r[2] == 0) for r in rows[:limit]])
    if len(rows) <= limit or not items:
        return Page(items, None)
    last, last_rank = items[-1].interaction, rows[limit - 1][2]
    if last_rank is None:
        return Page(items, position_cursor(last.created_at, last.id, last.position))
    return Page(items, ranked_cursor(last_rank, last.created_at, last.id, last.position))


# --------------------------------------------------------------------------- metrics


# --------------------------------------------------------------------------- the Decisions page

CLOSED_EVENT_TYPES = (
    "interaction.answered",
    "interaction.rejected",
    "interaction.expired",
    "interaction.canceled",
    "interaction.interrupted",
)


def runs_by_id(session: Session, run_ids: Iterable[str]) -> dict[str, Run]:
    ids = sorted(set(run_ids))
    if not ids:
        return {}
    return {run.id: run for run in session.scalars(select(Run).where(Run.id.in_(ids)))}


def recently_closed(session: Session, principal: Principal, *, scan: int) -> list[InteractionView]:
    """Interactions the caller may see that closed (answered, rejected, expired, canceled, interrupted)
    within the last ``scan`` committed events, most recently closed first; ``names_me`` on those the caller
    took part in (``team_views.took_part``).

    "Recently" is measured on the event log, so the read is a primary-key range of at most ``scan`` rows
    whatever the size of the interactions table. This is a view of now, not a cursor: it reads every
    committed event (an answer just made shows, though a writer still open may later add lower seqs).
    """
    recent = select(Event.seq, Event.type, Event.data).order_by(*NEWEST_FIRST).limit(scan).subquery("recent")
    rows = session.scalars(
        select(recent.c.data).where(recent.c.type.in_(CLOSED_EVENT_TYPES)).order_by(recent.c.seq.desc())
    )
    ids = list(dict.fromkeys(d["interaction_id"] for d in rows if isinstance((d or {}).get("interaction_id"), str)))
    if not ids:
        return []
    visible = session.execute(
        select(Interaction, Principal.name, team_views.took_part(principal.id, live_targets(principal)))
        .join(Run, Run.id == Interaction.run_id)
        .outerjoin(Principal, Principal.id == Interaction.answered_by_id)
        .where(Interaction.id.in_(ids), Interaction.status != InteractionStatus.PENDING, interaction_visible(principal))
    ).all()
    by_id = {row[0].id: InteractionView(row[0], row[1], names_me=bool(row[2])) for row in visible}
    return [by_id[i] for i in ids if i in by_id]
