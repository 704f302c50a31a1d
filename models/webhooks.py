"""The read side of webhooks: the event types a subscription may name, which events it matches, the events
due to it (only final ones: ``models.horizon.final_below``), and the lists the API pages through."""

from __future__ import annotations

import base64
import secrets
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, false, func, or_, select, true
from sqlalchemy.orm import Session

from models import event_reads
from models.cursors import read_text, text_cursor
from models.horizon import final_below
from models.status import InteractionStatus, RunStatus, StepStatus, WebhookStatus
from models.tables import Event, Interaction, Run
from models.webhook_tables import Webhook, WebhookDelivery
from parkway.netguard import UnsafeUrl, check_url
from parkway.settings import get_settings

EVENT_TYPES = frozenset(
    {"run.created", *(f"run.{s}" for s in RunStatus if s not in (RunStatus.RUNNING, RunStatus.WAITING))}
    # A step's events: ``step.resumed`` when its continuation commits (``resuming`` is derived, never an event).
    | {"step.parked", "step.resumed"}
    | {f"step.{s}" for s in StepStatus if s not in (StepStatus.RUNNING, StepStatus.PARKED, StepStatus.RESUMING)}
    | {f"interaction.{t}" for t in ("asked", "responded", "reminded", "escalated", "delegated")}
    | {f"interaction.{s}" for s in InteractionStatus if s != InteractionStatus.PENDING}
    | {"continuation.ready", "continuation.dead"}
    | {"toolcall.intent", "toolcall.authorized", "toolcall.settled", "toolcall.possibly_ran"}
    | {"review.started", "review.completed", "review.failed", "review.interrupted"}
    | {"webhook.failing"}
)
FAMILIES = frozenset(t.split(".")[0] for t in EVENT_TYPES)


def unknown_event_types(patterns: list[str]) -> list[str]:
    """The patterns that name no event type: neither a type, nor ``family.*``, nor ``*``."""
    return [p for p in patterns if p != "*" and p not in EVENT_TYPES and not (p.endswith(".*") and p[:-2] in FAMILIES)]


def input_problem(url: str | None, patterns: list[str] | None) -> str | None:
    """Why a subscription's URL or event patterns are refused (nothing is stored then), or ``None``: an
    event type that names nothing, or a URL that is not http(s) or may not be reached (``parkway.netguard``)."""
    unknown = unknown_event_types(patterns or [])
    if unknown:
        return (
            f"no event type is named {', '.join(unknown)} (docs/webhooks.md lists them; `family.*` and `*` match many)"
        )
    if url is not None:
        try:
            check_url(url, get_settings().webhook_networks)
        except UnsafeUrl as exc:
            return str(exc)
    return None


def new_secret() -> str:
    """A signing secret: ``whsec_`` + base64 of 24 random bytes (Standard Webhooks' form)."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def matches(patterns: list[str], targets: list[str] | None) -> ColumnElement[bool]:
    """SQL condition on ``Event`` joined with its ``Run``: the events a subscription delivers."""
    if "*" in patterns:
        of_type: ColumnElement[bool] = true()
    else:
        exact = [p for p in patterns if not p.endswith(".*")]
        prefixes = [Event.type.startswith(p[:-1], autoescape=True) for p in patterns if p.endswith(".*")]
        of_type = or_(Event.type.in_(exact) if exact else false(), *prefixes)
    return of_type if targets is None else and_(of_type, Run.target.in_(targets))


def due_events(session: Session, hook: Webhook, *, limit: int) -> tuple[list[Event], int]:
    """The final events after the subscription's cursor that it matches, oldest first, at most ``limit``;
    and the cursor it may move to when all of them are delivered: past the non-matching events too, up to
    the last event read (or to the final horizon when none is left)."""
    below = final_below()
    # A bounded window of the log (matching or not), so a subscription to rare types reads little per call.
    window = (
        select(Event.seq)
        .where(event_reads.after(hook.cursor), event_reads.below(below))
        .order_by(*event_reads.IN_ORDER)
        .limit(limit * 20)
    )
    upto = session.scalar(select(func.max(window.subquery().c.seq)))
    if upto is None:
        return [], hook.cursor
    stmt = (
        select(Event)
        .join(Run, Run.id == Event.run_id)
        .where(event_reads.after(hook.cursor), event_reads.through(upto), matches(hook.events, hook.targets))
        .order_by(*event_reads.IN_ORDER)
        .limit(limit)
    )
    events = list(session.scalars(stmt))
    return events, (events[-1].seq if len(events) == limit else upto)


def event_bodies(session: Session, events: list[Event]) -> list[dict[str, Any]]:
    """The ``data`` of each delivery: the event as the API shows it (its ``data`` never holds a sensitive
    value); an ``interaction.asked`` adds what a chat message needs to ask the question (their
    interactions read in one statement)."""
    asked = [e.data.get("interaction_id") for e in events if e.type == "interaction.asked"]
    found = {i.id: i for i in session.scalars(select(Interaction).where(Interaction.id.in_(asked)))} if asked else {}
    bodies = []
    for event in events:
        body: dict[str, Any] = {
            "seq": event.seq,
            "run_id": event.run_id,
            "type": event.type,
            "at": event.at.isoformat(),
            "data": event.data,
        }
        interaction = found.get(event.data.get("interaction_id")) if event.type == "interaction.asked" else None
        if interaction is not None:
            body["interaction"] = {
                "id": interaction.id,
                "kind": interaction.kind,
                "prompt": interaction.prompt,
                "schema": interaction.schema,
                "target": interaction.target,
                "expires_at": interaction.expires_at.isoformat() if interaction.expires_at else None,
                "link": f"{get_settings().public_base}/decisions",  # the Decisions page lists it to answer
            }
        bodies.append(body)
    return bodies


def get_webhook(session: Session, webhook_id: str) -> Webhook | None:
    return session.get(Webhook, webhook_id)


def list_webhooks(session: Session, *, cursor: str | None, limit: int) -> tuple[list[Webhook], str | None]:
    """Subscriptions by id; the cursor of the next page or ``None``."""
    stmt = select(Webhook).order_by(Webhook.id).limit(limit + 1)
    if cursor is not None:
        stmt = stmt.where(Webhook.id > read_text(cursor))
    rows = list(session.scalars(stmt))
    return rows[:limit], (text_cursor(rows[limit - 1].id) if len(rows) > limit else None)


def list_deliveries(
    session: Session, webhook_id: str, *, cursor: str | None, limit: int
) -> tuple[list[WebhookDelivery], str | None]:
    """A subscription's delivery log, newest first; the cursor of the next page or ``None``."""
    stmt = select(WebhookDelivery).where(WebhookDelivery.webhook_id == webhook_id)
    if cursor is not None:
        text = read_text(cursor)
        stmt = stmt.where(WebhookDelivery.id < int(text)) if text.isdigit() else stmt.where(false())
    rows = list(session.scalars(stmt.order_by(WebhookDelivery.id.desc()).limit(limit + 1)))
    return rows[:limit], (text_cursor(str(rows[limit - 1].id)) if len(rows) > limit else None)


def states(session: Session) -> dict[str, list[str]]:
    """Subscription ids by state."""
    found: dict[str, list[str]] = {}
    for webhook_id, status in session.execute(select(Webhook.id, Webhook.status).order_by(Webhook.id)):
        found.setdefault(status, []).append(webhook_id)
    return found


def oldest_pending(session: Session) -> dict[str, datetime | None]:
    """Per active subscription, when the oldest final event after its cursor was written (``None``: none);
    one primary-key probe each."""
    first_after = (
        select(Event.at)
        .where(event_reads.after(Webhook.cursor), event_reads.below(final_below()))
        .order_by(*event_reads.IN_ORDER)
        .limit(1)
        .scalar_subquery()
    )
    rows = session.execute(select(Webhook.id, first_after).where(Webhook.status == WebhookStatus.ACTIVE.value))
    return {webhook_id: at for webhook_id, at in rows}
