"""Webhook subscriptions: create, change, delete, and the delivery task's claim and cursor.

Each transition is a compare-and-set on the subscription row. The delivery task claims the row (a lease,
``claimed_by``) so one attempt at most is in flight per subscription; every later write of that attempt
(the cursor moved on after a 2xx, a failure recorded, the release) holds only while the claim is still its
own, so an attempt that outlived its lease changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Float,
    Integer,
    String,
    Table,
    Text,
    bindparam,
    case,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from models import event_reads
from models.clock import db_now
from models.horizon import final_below
from models.status import WebhookStatus
from models.store.events import append_event
from models.store.sql import new_id, skip_locked, word
from models.tables import Event
from models.webhook_tables import Webhook, WebhookDelivery

_W = Webhook.__table__.c


def create_webhook(
    session: Session,
    *,
    url: str,
    events: list[str],
    targets: list[str] | None,
    description: str | None,
    secret_sealed: str,
    links: bool = False,
) -> Webhook:
    """-> active, its cursor at the final horizon: it delivers the events that commit from now on."""
    webhook_id = new_id()
    session.execute(
        insert(Webhook).values(
            id=webhook_id,
            url=url,
            events=events,
            targets=targets,
            description=description,
            secret_sealed=secret_sealed,
            links=links,
            status=WebhookStatus.ACTIVE,
            attempt=0,
            cursor=select(final_below() - 1).scalar_subquery(),
            due_at=db_now(),
        )
    )
    hook = session.get(Webhook, webhook_id)
    assert hook is not None
    return hook


def update_webhook(session: Session, webhook_id: str, changes: dict[str, Any], enabled: bool | None) -> Webhook | None:
    """Change url, events, targets, description or links; ``enabled=False``: any -> disabled; ``enabled=True``:
    failing|disabled -> active, due now, its failed attempts forgotten, resuming from its cursor (an active
    one keeps its retry schedule). ``None`` when no such subscription."""
    values = dict(changes)
    if enabled is False:
        values.update(status=WebhookStatus.DISABLED, reason="disabled by an admin")
    elif enabled is True:
        stopped = _W.status != word(WebhookStatus.ACTIVE)
        values.update(
            status=WebhookStatus.ACTIVE,
            reason=case((stopped, None), else_=_W.reason),
            attempt=case((stopped, 0), else_=_W.attempt),
            due_at=case((stopped, db_now()), else_=_W.due_at),
        )
    if values:
        session.execute(update(Webhook).where(_W.id == webhook_id).values(**values))
    return session.get(Webhook, webhook_id, populate_existing=True)


def delete_webhook(session: Session, webhook_id: str) -> bool:
    """Remove a subscription and its delivery log; ``False`` when there was none."""
    return _changed(session, delete(Webhook).where(_W.id == webhook_id))


def rotate_secret(session: Session, webhook_id: str, secret_sealed: str, overlap_s: float) -> Webhook | None:
    """A new signing secret; the one it replaces still signs too for ``overlap_s`` (requests carry both
    signatures), so receivers switch without a gap. ``None`` when no such subscription."""
    stmt = (
        update(Webhook)
        .where(_W.id == webhook_id)
        .values(secret_sealed=secret_sealed, previous_secret_sealed=_W.secret_sealed, previous_until=db_now(overlap_s))
    )
    return _changed_row(session, stmt, webhook_id)


def replay(session: Session, webhook_id: str, after_seq: int) -> Webhook | None:
    """cursor -> ``after_seq`` (back, never forward), due now: the events after it are sent again, each
    with the ``webhook-id`` it had the first time. An attempt in flight finds the cursor moved and stops.
    ``None`` when no such subscription, or its cursor is before ``after_seq``."""
    stmt = (
        update(Webhook)
        .where(_W.id == webhook_id, _W.cursor >= after_seq)
        .values(cursor=after_seq, attempt=0, due_at=db_now(), published_at=None)
    )
    return _changed_row(session, stmt, webhook_id)


def _changed_row(session: Session, stmt: Any, webhook_id: str) -> Webhook | None:
    if not _changed(session, stmt):
        return None
    return session.get(Webhook, webhook_id, populate_existing=True)


def claim_webhook(session: Session, webhook_id: str, token: str, lease_s: float) -> Webhook | None:
    """active and due, unclaimed or its lease run out -> claimed by ``token`` for ``lease_s`` (its publish
    consumed: once released, the sweep may publish it at once). ``None``:
    not active, not due yet, or another attempt holds it."""
    row = session.execute(
        update(Webhook)
        .where(
            _W.id == webhook_id,
            _W.status == word(WebhookStatus.ACTIVE),
            _W.due_at <= db_now(),
            or_(_W.claimed_by.is_(None), _W.lease_expires_at < db_now()),
        )
        .values(
            claimed_by=token, lease_expires_at=db_now(lease_s), published_at=None
        )  # the sweep may send it again once released
        .returning(_W.id)
    ).first()
    return None if row is None else session.get(Webhook, webhook_id, populate_existing=True)


def _changed(session: Session, stmt: Any) -> bool:
    return session.execute(stmt.returning(_W.id)).first() is not None


def _held(webhook_id: str, token: str) -> Any:
    return update(Webhook).where(_W.id == webhook_id, _W.claimed_by == token, _W.lease_expires_at >= db_now())


def advance(session: Session, webhook_id: str, token: str, *, cursor: int, to: int, lease_s: float) -> bool:
    """cursor -> to (after a 2xx, or past events it does not match), its failed attempts forgotten and the
    lease renewed. ``False``: the claim is no longer this attempt's, or the cursor moved meanwhile."""
    stmt = _held(webhook_id, token).where(_W.cursor == cursor)
    values = {"cursor": to, "attempt": 0, "lease_expires_at": db_now(lease_s)}
    return _changed(session, stmt.values(**values))


def release(session: Session, webhook_id: str, token: str) -> bool:
    """claimed -> unclaimed (nothing left to send now); ``False`` if the claim was no longer this one's."""
    return _changed(session, _held(webhook_id, token).values(claimed_by=None, lease_expires_at=None))


def record_failure(
    session: Session,
    webhook_id: str,
    token: str,
    *,
    seq: int,
    retry_in_s: float | None,
    status: WebhookStatus,
    reason: str,
    public_reason: str,
) -> bool:
    """A failed attempt at event ``seq``: one more attempt counted and the claim released; ``retry_in_s``:
    due again then (stays active); else -> ``status`` (failing after the last retry, disabled on a 410) with
    ``reason``. Turning failing also writes ``webhook.failing`` into the log of the run whose event could
    not be delivered, with ``public_reason`` (no address: whoever reads that run reads it). ``False`` if
    the claim was no longer this attempt's."""
    values: dict[str, Any] = {"attempt": _W.attempt + 1, "claimed_by": None, "lease_expires_at": None}
    if retry_in_s is not None:
        values["due_at"] = db_now(retry_in_s)
    else:
        values.update(status=status, reason=reason)
    if not _changed(session, _held(webhook_id, token).values(**values)):
        return False
    run_id = session.scalar(select(Event.run_id).where(event_reads.at(seq)))
    if status == WebhookStatus.FAILING and retry_in_s is None and run_id is not None:
        append_event(session, run_id, "webhook.failing", webhook_id=webhook_id, seq=seq, reason=public_reason)
    return True


@dataclass(frozen=True)
class DeliveryLine:
    """One line of the delivery log: an attempt at event ``seq`` and what it got."""

    seq: int
    attempt: int
    status_code: int | None
    latency_ms: int
    error: str | None = None
    next_attempt_in_s: float | None = None


_LINE_COLUMNS = {"seq": BigInteger, "attempt": Integer, "status_code": Integer, "latency_ms": Integer, "error": Text,
                 "next_attempt_in_s": Float}  # fmt: skip


@cache
def _record_lines() -> Any:
    """``record_deliveries``' statement: the lines given as one array per column, so it is compiled once
    and sent once whatever their number (a multi-row VALUES is compiled anew for each batch)."""
    given = func.unnest(
        *(bindparam(name, type_=ARRAY(kind)) for name, kind in _LINE_COLUMNS.items())
    ).table_valued(*_LINE_COLUMNS).render_derived(name="given")  # fmt: skip
    lines = select(
        bindparam("webhook_id", type_=String),
        given.c.seq,
        given.c.attempt,
        db_now(),
        given.c.status_code,
        given.c.latency_ms,
        given.c.error,
        db_now(given.c.next_attempt_in_s),
    )
    names = ["webhook_id", "seq", "attempt", "at", "status_code", "latency_ms", "error", "next_attempt_at"]
    return insert(cast(Table, WebhookDelivery.__table__)).from_select(names, lines)


def record_deliveries(session: Session, webhook_id: str, lines: Sequence[DeliveryLine]) -> None:
    """Lines of the delivery log, in one statement, stamped with the database's clock."""
    if not lines:
        return
    arrays = {name: [getattr(line, name) for line in lines] for name in _LINE_COLUMNS}
    session.execute(_record_lines(), {"webhook_id": webhook_id, **arrays})


def due_webhooks(session: Session, *, batch: int, republish_after_s: float) -> list[str]:
    """The sweep's category: active subscriptions that are due, unclaimed (or their lease ran out), behind
    the newest final event, and not published in the last ``republish_after_s``; at most ``batch``, read
    through ``ix_webhooks_active_due``, each marked published now (a concurrent sweep skips them)."""
    below = event_reads.below(final_below())
    newest = select(Event.seq).where(below).order_by(*event_reads.NEWEST_FIRST).limit(1).scalar_subquery()
    stmt = (
        select(_W.id)
        .where(
            _W.status == word(WebhookStatus.ACTIVE),
            _W.due_at <= db_now(),
            or_(_W.claimed_by.is_(None), _W.lease_expires_at < db_now()),
            or_(_W.published_at.is_(None), _W.published_at < db_now(-republish_after_s)),
            _W.cursor < newest,
        )
        .order_by(_W.due_at)
        .limit(batch)
    )
    ids = list(session.scalars(skip_locked(stmt)))
    if ids:
        session.execute(update(Webhook).where(_W.id.in_(ids)).values(published_at=db_now()))
    return ids


def prune_deliveries(session: Session, *, older_than_s: float, batch: int) -> int:
    """Delete at most ``batch`` lines of the delivery log older than ``older_than_s``, oldest first (through
    ``ix_webhook_deliveries_at``; a concurrent sweep skips the rows this one holds). Returns how many."""
    old = skip_locked(
        select(WebhookDelivery.id).where(WebhookDelivery.at < db_now(-older_than_s)).order_by(WebhookDelivery.at)
    ).limit(batch)
    deleted = session.execute(delete(WebhookDelivery).where(WebhookDelivery.id.in_(old)).returning(WebhookDelivery.id))
    return len(deleted.all())
