"""What the Decisions page shows: the pending prompts grouped one card per run, and what closed recently.

"For me" (the default view) is the prompts for a target the person holds a live grant on; "all" is every
prompt they may read (for an admin, every prompt). The page is read after the event cursor its stream
starts from, so nothing that happens after the read is missed; a prompt asked later is fetched as one
run's card (``run_card``) by the page's script.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import Request, Response
from sqlalchemy.orm import Session

from api.pages import forms, teams
from api.pages.render import render, run_status
from api.pages.session import CSRF_FIELD, NONCE_COOKIE, csrf_token, session_id
from models import access, cursors, event_log, history, team_views
from models.access import InteractionView
from models.base import utcnow
from models.status import RUN_TERMINAL, InteractionKind, InteractionStatus
from models.tables import Principal, Run
from parkway.db import transaction

View = Literal["mine", "all"]
PENDING_LIMIT = 50
RECENT_SCAN = 2000  # "recently" = among the last this many events (a primary-key range, bounded)
RECENT_LIMIT = 20
DECIDED = (InteractionStatus.ANSWERED, InteractionStatus.REJECTED)


@dataclass
class Notice:
    """The outcome of the last form post, shown above the lists."""

    ok: bool
    text: str
    details: list[str] = field(default_factory=list)
    run_id: str | None = None  # shown with its live status
    receipt: dict[str, Any] | None = None  # an answer's receipt (an approval link's page shows it)


@dataclass
class Card:
    """One interaction on the page, with its run and (when answerable) the form to answer it."""

    view: InteractionView
    run: Run | None
    run_status: str
    ended: str | None = None  # why it is not answerable, for the "no longer answerable" list
    form: forms.Field | None = None
    response_id: str = ""
    me: str = ""  # the signed-in person's name: their own response to a quorum wait is shown as theirs
    holds: bool = False  # the person holds a place on it (``team_views.holding``): they may answer or delegate

    @property
    def i(self) -> Any:
        return self.view.interaction

    @property
    def team(self) -> teams.Team:
        return teams.Team(self.view)

    @property
    def progress(self) -> str | None:
        """What a quorum wait has: "2 of 3 approved: ana, bo" (None for a first-wins wait)."""
        return self.team.progress

    @property
    def needed(self) -> str | None:
        """What it still needs, and whether the person responded: "1 more needed; you may approve"."""
        return self.team.needed(self.me, self.holds)

    @property
    def answerable(self) -> bool:
        """Whether the card offers the person an answer and a delegation: pending, a place of theirs, and not
        yet responded to by them."""
        return self.ended is None and self.holds and self.team.mine(self.me) is None

    @property
    def decision(self) -> str:
        """How a closed interaction reads: a permission is approved or rejected, a question answered."""
        status = str(self.i.status)
        if self.i.kind == InteractionKind.PERMISSION and status == InteractionStatus.ANSWERED:
            return "approved"
        return status


@dataclass
class RunCard:
    """A run's answerable prompts, shown as one card with one "Cancel run"."""

    run_id: str
    run: Run | None
    run_status: str
    prompts: list[Card]
    cancel_id: str = field(default_factory=lambda: uuid.uuid4().hex)


def _card(view: InteractionView, runs: dict[str, Run], me: str, held: Collection[str] = ()) -> Card:
    interaction = view.interaction
    run = runs.get(interaction.run_id)
    card = Card(view=view, run=run, run_status=run_status(run), me=me, holds=interaction.id in held)
    if interaction.status != InteractionStatus.PENDING:
        card.ended = interaction.status
    elif card.run_status in RUN_TERMINAL:
        card.ended = f"run {card.run_status}"
    elif interaction.expires_at is not None and interaction.expires_at <= utcnow():
        card.ended = "expired"
    else:
        if interaction.kind == InteractionKind.QUESTION:
            card.form = forms.fields_for(interaction.schema, [str(s) for s in (interaction.sensitive or [])])
        card.response_id = uuid.uuid4().hex
    return card


def _by_run(cards: list[Card]) -> list[RunCard]:
    """Answerable cards grouped by run, runs in the order of their oldest pending prompt."""
    grouped: dict[str, RunCard] = {}
    for card in cards:
        run_id = card.i.run_id
        if run_id not in grouped:
            grouped[run_id] = RunCard(run_id=run_id, run=card.run, run_status=card.run_status, prompts=[])
        grouped[run_id].prompts.append(card)
    return list(grouped.values())


def _pending(session: Session, principal: Principal, view: View, cursor: str | None) -> access.Page[InteractionView]:
    """The pending prompts of the view, oldest first (a cursor the page did not hand out starts over)."""
    try:
        return history.pending(session, principal, mine=view == "mine", cursor=cursor, limit=PENDING_LIMIT)
    except cursors.InvalidCursor:
        return history.pending(session, principal, mine=view == "mine", limit=PENDING_LIMIT)


def _forms(request: Request) -> dict[str, str]:
    return {"csrf": csrf_token(request.cookies.get(NONCE_COOKIE, ""), session_id(request)), "csrf_field": CSRF_FIELD}


def decisions_page(
    request: Request,
    principal: Principal,
    *,
    notice: Notice | None = None,
    status_code: int = 200,
    cursor: str | None = None,
    view: View = "mine",
) -> Response:
    with transaction() as session:
        after = event_log.stream_cursor(session)  # read first: the stream then misses nothing read after it
        page = _pending(session, principal, view, cursor)
        closed = access.recently_closed(session, principal, scan=RECENT_SCAN)
        if view == "mine":
            targets = history.my_targets(session, principal)
            closed = [v for v in closed if v.interaction.target in targets or v.names_me]  # and their own
        run_ids = [v.interaction.run_id for v in [*page.items, *closed]]
        runs = access.runs_by_id(session, [*run_ids, *([notice.run_id] if notice and notice.run_id else [])])
        held = team_views.holding(session, principal.id, [v.interaction.id for v in page.items])
    pending = [_card(v, runs, principal.name, held) for v in page.items]
    closed_cards = [_card(v, runs, principal.name) for v in closed]
    ended = [c for c in pending if c.ended] + [c for c in closed_cards if c.i.status not in DECIDED]
    notice_run = runs.get(notice.run_id) if notice and notice.run_id else None
    context = {
        **_forms(request),
        "principal": principal,
        "view": view,
        "notice": notice,
        "notice_run": notice_run,
        "notice_run_status": run_status(notice_run),
        "runs": _by_run([c for c in pending if not c.ended]),
        "decided": [c for c in closed_cards if c.i.status in DECIDED][:RECENT_LIMIT],
        "ended": ended[:RECENT_LIMIT],
        "next_cursor": page.next,
        "stream_url": f"/decisions/stream?after={after}",
        "terminal": sorted(RUN_TERMINAL),
    }
    return render(request, "decisions.html", context, status_code=status_code)


def run_card(request: Request, principal: Principal, run_id: str, view: View) -> Response:
    """One run's card of answerable prompts in the view (a fragment the page inserts); 204 when the run
    has none the person may answer now."""
    with transaction() as session:
        page = history.pending(session, principal, mine=view == "mine", run_id=run_id, limit=PENDING_LIMIT)
        runs = access.runs_by_id(session, [run_id])
        held = team_views.holding(session, principal.id, [v.interaction.id for v in page.items])
    cards = [card for card in (_card(v, runs, principal.name, held) for v in page.items) if not card.ended]
    if not cards:
        return Response(status_code=204, headers={"Cache-Control": "no-store"})
    context = {**_forms(request), "card": _by_run(cards)[0]}
    return render(request, "_run_card.html", context)
