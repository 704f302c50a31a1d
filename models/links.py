"""Approval links (docs/teams.md, "Approval links"): a URL for one person and one wait, that decides once.

The URL's token is random (``POST /v1/interactions/{id}/links``), or, for a webhook delivery, derived from
the subscription, the event and the person with a key of its own (a delivery sent again carries the same
link); only its SHA-256 is stored (``models.link_tables``). Opening a link reads it (``open_link``) and says
why it cannot be used now (``refusal``), from what is true now: its person disabled or holding no place on
the wait (a grant revoked, a place delegated away) is 403, a link used or a wait decided 409, a wait ended or
a link past its expiry 410. Deciding goes through the SDK's answer, which uses the link in its transaction.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from models import access, store, team_views
from models.access import InteractionView
from models.base import utcnow
from models.link_tables import ApprovalLink
from models.status import RUN_TERMINAL, InteractionStatus, PrincipalKind
from models.store.interactions import place_of
from models.store.sql import ANSWERER, INTER, PRIN
from models.tables import Event, Interaction, Principal
from parkway.crypto import derived_key
from parkway.errors import Conflict, Forbidden, Gone, NotFound, OutcomeError
from parkway.settings import get_settings
from parkway.tokens import hash_token

PATH = "/links"  # a link is PARKWAY_PUBLIC_URL + PATH + "/" + its token
PEOPLE = (PrincipalKind.HUMAN.value, PrincipalKind.ADMIN.value)
# The events whose deliveries carry links, when their subscription asks for them.
ASKING = ("interaction.asked", "interaction.reminded", "interaction.escalated")


def url_of(token: str) -> str:
    return f"{get_settings().public_base}{PATH}/{token}"


def new_token() -> str:
    return "pl_" + secrets.token_urlsafe(32)


def delivery_token(webhook_id: str, seq: int, principal_id: str) -> str:
    """The link a subscription's delivery of event ``seq`` carries for a person: the same each time it is sent."""
    key = derived_key(get_settings().resolved_secret_key(), b"parkway approval links v1")
    mac = hmac.new(key, f"{webhook_id}|{seq}|{principal_id}".encode(), hashlib.sha256).digest()
    return "pl_" + base64.urlsafe_b64encode(mac).decode().rstrip("=")


def justify_asked(interaction: Interaction) -> bool:
    """Whether the wait asks each decision for a justification (``justify=True``)."""
    return bool((interaction.team or {}).get("justify"))


# --------------------------------------------------------------------------- handing links out


_NAMED = ANSWERER.alias("link_named")


@cache
def _people_named() -> Any:
    return (
        select(PRIN.c.id, PRIN.c.name)
        .select_from(_NAMED.join(PRIN, PRIN.c.id == _NAMED.c.principal_id))
        .join(INTER, INTER.c.id == _NAMED.c.interaction_id)
        .where(
            _NAMED.c.interaction_id == bindparam("iid"),
            _NAMED.c.level <= bindparam("level"),
            PRIN.c.disabled_at.is_(None),
            PRIN.c.kind.in_(PEOPLE),
            place_of(PRIN.c.id, every_level=True).is_not(None),
        )
        .distinct()
        .order_by(PRIN.c.name)
    )


@cache
def _may_hold() -> Any:
    return select(place_of(bindparam("pid"), every_level=True)).where(INTER.c.id == bindparam("iid"))


def may_hold_place(session: Session, interaction_id: str, principal_id: str) -> bool:
    """Whether the person holds a place on the wait, now or at one of its escalation levels."""
    return session.scalar(_may_hold(), {"iid": interaction_id, "pid": principal_id}) is not None


def hand_out(
    session: Session, interaction: Interaction, person: Principal, *, made_by: Principal, expires_at: datetime | None
) -> tuple[str, datetime | None]:
    """A new link for ``person`` on ``interaction``, expiring with the wait or at ``expires_at`` if sooner:
    its URL and expiry."""
    token = new_token()
    expiry = min((t for t in (interaction.expires_at, expires_at) if t is not None), default=None)
    store.make_link(session, token_hash=hash_token(token), interaction_id=interaction.id, principal_id=person.id,
                    expires_at=expiry, made_by_id=made_by.id)  # fmt: skip
    return url_of(token), expiry


def carry_links(session: Session, webhook_id: str, events: list[Event], bodies: list[dict[str, Any]]) -> None:
    """Add to each body of a question asked, reminded or escalated ``links``: one per person its answerers
    name at the event's level (assignees, escalation levels, delegates), each for that person alone."""
    asking = [(e, b) for e, b in zip(events, bodies, strict=True) if e.type in ASKING]
    ids = {str(e.data.get("interaction_id")) for e, _ in asking}
    waits = {i.id: i for i in session.scalars(select(Interaction).where(Interaction.id.in_(ids)))} if ids else {}
    for event, body in asking:
        interaction = waits.get(str(event.data.get("interaction_id")))
        if interaction is None or interaction.status != InteractionStatus.PENDING:
            body["links"] = []
            continue
        level = event.data.get("level", interaction.level if event.type != "interaction.asked" else 0)
        links = []
        for person_id, name in session.execute(_people_named(), {"iid": interaction.id, "level": level}):
            token = delivery_token(webhook_id, event.seq, person_id)
            store.make_link(session, token_hash=hash_token(token), interaction_id=interaction.id,
                            principal_id=person_id, expires_at=interaction.expires_at,
                            webhook_id=webhook_id)  # fmt: skip
            links.append({"principal": name, "url": url_of(token), "expires_at": _iso(interaction.expires_at)})
        body["links"] = links


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


# --------------------------------------------------------------------------- opening a link


@dataclass
class Opened:
    """A link as opened now: the link, its person, the wait (with its team) and its run's status."""

    link: ApprovalLink
    person: Principal
    view: InteractionView
    run_status: str
    holds: bool  # the person holds a place on the wait now (``team_views.holding``)

    @property
    def interaction(self) -> Interaction:
        return self.view.interaction

    def state(self) -> dict[str, Any]:
        """The wait's authoritative state, as a 409 or 410 carries it (no value)."""
        return state_of(self.view, self.run_status)


def state_of(view: InteractionView, run_status: str) -> dict[str, Any]:
    i = view.interaction
    return {"id": i.id, "run_id": i.run_id, "key": i.key, "kind": i.kind, "status": i.status,
            "run_status": run_status, "answered_by": view.answered_by, "answered_at": _iso(i.answered_at),
            "expires_at": _iso(i.expires_at)}  # fmt: skip


def open_link(session: Session, token: str) -> Opened | None:
    """The link of ``token`` with what it is for, read now; ``None`` for a token no link has."""
    token_hash = hash_token(token)
    row = session.execute(
        select(ApprovalLink, Principal)
        .join(Principal, Principal.id == ApprovalLink.principal_id)
        .where(ApprovalLink.token_hash == token_hash)
    ).first()
    if row is None or not hmac.compare_digest(row[0].token_hash, token_hash):
        return None
    link, person = row
    view = access.interaction_view(session, link.interaction_id)
    if view is None:  # pragma: no cover - a link's wait is never deleted
        return None
    run_status = access.run_status_of(session, view.interaction.run_id) or ""
    holds = bool(team_views.holding(session, person.id, [link.interaction_id]))
    return Opened(link, person, view, run_status, holds)


def refusal(opened: Opened | None) -> OutcomeError | None:
    """Why the link cannot decide now, as the API would say it (404, 403, 409, 410), or ``None``."""
    if opened is None:
        return NotFound("no approval link has this address")
    if opened.person.disabled_at is not None:
        return Forbidden(f"this link was for {opened.person.name}, who may no longer decide")
    if opened.link.used_at is not None:
        return Conflict(f"this link was used at {_iso(opened.link.used_at)}; a link decides once", opened.state())
    ended_ = ended(opened.view, opened.run_status)
    if ended_ is not None:
        return ended_
    expiry = opened.link.expires_at
    if expiry is not None and expiry <= utcnow():
        return Gone(f"this link expired at {_iso(expiry)}", opened.state())
    if not opened.holds:
        return Forbidden(f"{opened.person.name} holds no place on interaction {opened.interaction.id} now")
    return None


def ended(view: InteractionView, run_status: str) -> OutcomeError | None:
    """``Conflict`` for a decided wait, ``Gone`` for one that ended otherwise (or whose run ended), else ``None``."""
    i, state = view.interaction, state_of(view, run_status)
    if i.status in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED):
        return Conflict(f"interaction {i.id} was already {i.status}", state)
    if i.status != InteractionStatus.PENDING:
        return Gone(f"interaction {i.id} is {i.status}; it can no longer be answered", state)
    if run_status in RUN_TERMINAL:
        return Gone(f"interaction {i.id}'s run is {run_status}; it can no longer be answered", state)
    return None


def justifications(session: Session, interaction_ids: list[str]) -> dict[tuple[str, str], str]:
    """The justification given with each response made through a link, by (interaction, principal name)."""
    if not interaction_ids:
        return {}
    rows = session.execute(
        select(ApprovalLink.interaction_id, Principal.name, ApprovalLink.justification)
        .join(Principal, Principal.id == ApprovalLink.principal_id)
        .where(
            ApprovalLink.interaction_id.in_(interaction_ids),
            ApprovalLink.used_at.is_not(None),
            ApprovalLink.justification.is_not(None),
        )
    )
    return {(iid, name): str(why) for iid, name, why in rows}
