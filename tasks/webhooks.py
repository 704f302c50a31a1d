"""The delivery task: ``parkway.deliver_webhook(webhook_id)`` sends a subscription the events after its cursor.

It claims the subscription (one attempt in flight per subscription, whatever the number of workers and
sweeps), reads the final events after the cursor that the subscription matches, and POSTs them one by one
in ``seq`` order; the cursor moves on past the 2xx answers by compare-and-set, once per batch (a crash
re-sends at most that batch, under the same ids). A failure records the attempt and makes the
subscription due again after the retry schedule's next delay (a 429's ``Retry-After`` if longer),
``failing`` after the last one, ``disabled`` on a 410. Having delivered for ``BUDGET_S`` it hands on to a
new message, so one busy subscription never holds a worker. The sweep publishes the task for subscriptions
behind the log (beat/sweep.py): nothing on the answer path writes for webhooks.
"""

from __future__ import annotations

import json
import logging
import random
import time
from typing import Any

from models import links, store, webhooks
from models.base import utcnow
from models.status import WebhookStatus
from models.store import DeliveryLine, new_id
from models.webhook_tables import Webhook
from parkway.crypto import unseal
from parkway.db import database_unavailable, transaction
from parkway.settings import get_settings
from tasks import webhook_http
from tasks.celery_app import DELIVER_WEBHOOK, app
from tasks.publish import publish_webhooks
from tasks.webhook_http import PHASES, Connections, Sent, message_id, post

log = logging.getLogger("parkway.webhooks")

BUDGET_S = 10.0  # how long one message delivers before handing on to the next
BATCH = 50  # events read per statement


@app.task(name=DELIVER_WEBHOOK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def deliver_webhook(webhook_id: str) -> str:
    """Deliver a subscription's due events (ids only in the message; a duplicate finds it claimed: no-op)."""
    try:
        return deliver(webhook_id)
    except Exception as exc:
        if not database_unavailable(exc):
            raise
        log.warning("webhook %s: the database is unavailable; the sweep drives it again", webhook_id)
        return "database unavailable"


def deliver(webhook_id: str, *, budget_s: float = BUDGET_S) -> str:
    """Claim, send what is due until done, failed or out of budget, release; returns what happened."""
    settings = get_settings()
    lease_s = settings.claim_lease_s + PHASES * settings.webhook_timeout_s  # outlasts any one request
    token = new_id()
    with transaction(durable=False) as session:
        hook = store.claim_webhook(session, webhook_id, token, lease_s)
        if hook is None:
            log.debug("webhook %s is not due, or held by another attempt", webhook_id)
            return "not claimed"
        secrets = _signing_secrets(hook)
    with webhook_http.client() as sender:
        return _deliver_claimed(webhook_id, token, secrets, sender, lease_s=lease_s, budget_s=budget_s)


def _deliver_claimed(
    webhook_id: str, token: str, secrets: list[str], sender: Connections, *, lease_s: float, budget_s: float
) -> str:
    """Send the claimed subscription's due events through ``sender`` until done, failed or out of budget.

    The 2xx answers of a batch move the cursor, and go into the delivery log, in one transaction
    (``_settle``): at the batch's end, before a failure is recorded, and whenever half a claim lease has
    passed since the last one, which renews the lease before it can run out under a request."""
    deadline = time.monotonic() + budget_s
    settle_every_s = get_settings().claim_lease_s / 2
    while time.monotonic() < deadline:
        with transaction() as session:
            hook = session.get(Webhook, webhook_id)
            if hook is None or hook.claimed_by != token:
                return "claim lost"
            cursor, url, attempt = hook.cursor, hook.url, hook.attempt
            events, upto = webhooks.due_events(session, hook, limit=BATCH)
            data = webhooks.event_bodies(session, events)
            if hook.links:  # each named person's own approval link, the same each time the event is sent
                links.carry_links(session, webhook_id, events, data)
            bodies = [(e.seq, _encode(e.type, e.at.isoformat(), body)) for e, body in zip(events, data, strict=True)]
        if not bodies and upto == cursor:
            with transaction(durable=False) as session:
                store.release(session, webhook_id, token)
            return "caught up"
        lines: list[DeliveryLine] = []
        settled_at = time.monotonic()
        for seq, body in bodies:
            sent = post(sender, url, secrets=secrets, msg_id=message_id(webhook_id, seq), body=body)
            if not sent.ok:
                if not _settle(webhook_id, token, cursor=cursor, lines=lines, lease_s=lease_s):
                    return _stop(webhook_id, token)
                return _failed(webhook_id, token, seq=seq, attempt=attempt + 1, sent=sent)
            lines.append(DeliveryLine(seq, attempt + 1, sent.status_code, sent.latency_ms))
            attempt = 0
            if time.monotonic() - settled_at >= settle_every_s:
                if not _settle(webhook_id, token, cursor=cursor, lines=lines, lease_s=lease_s):
                    return _stop(webhook_id, token)
                cursor, lines, settled_at = seq, [], time.monotonic()
        # Every event read is delivered: the cursor moves past the events it does not match too.
        if not _settle(webhook_id, token, cursor=cursor, lines=lines, lease_s=lease_s, to=upto):
            return _stop(webhook_id, token)
    with transaction(durable=False) as session:
        store.release(session, webhook_id, token)
    publish_webhooks([webhook_id])  # out of budget, not out of events: the next message carries on
    return "handed on"


def _settle(
    webhook_id: str, token: str, *, cursor: int, lines: list[DeliveryLine], lease_s: float, to: int | None = None
) -> bool:
    """One transaction: the cursor moves from ``cursor`` past the delivered ``lines`` (or to ``to``), the
    lease renewed, and the lines logged. ``False`` if the claim or the cursor is no longer this attempt's."""
    to = to if to is not None else (lines[-1].seq if lines else cursor)
    if to == cursor and not lines:
        return True
    with transaction() as session:
        advanced = store.advance(session, webhook_id, token, cursor=cursor, to=to, lease_s=lease_s)
        if advanced:  # the row locked by that update: a concurrent delete waits, the log lines are safe
            store.record_deliveries(session, webhook_id, lines)
    return advanced


def _signing_secrets(hook: Webhook) -> list[str]:
    """The secret, and the one before it while a rotation's overlap lasts."""
    secrets = [unseal(hook.secret_sealed)]
    if hook.previous_secret_sealed and hook.previous_until and hook.previous_until > utcnow():
        secrets.append(unseal(hook.previous_secret_sealed))
    return secrets


def _stop(webhook_id: str, token: str) -> str:
    """The cursor moved under this attempt (a replay) or its claim ran out: release it if it is still its
    own, so the next attempt need not wait for the lease."""
    with transaction(durable=False) as session:
        released = store.release(session, webhook_id, token)
    return "cursor moved" if released else "claim lost"


def _public(sent: Sent) -> str:
    """Why an attempt failed, without the receiver's address or what it said: for the run's event log."""
    if sent.status_code is not None:
        return f"the receiver answered {sent.status_code}"
    return "no answer from the receiver (the delivery log says why)"


def _encode(event_type: str, at: str, data: dict[str, Any]) -> bytes:
    return json.dumps({"type": event_type, "timestamp": at, "data": data}, separators=(",", ":")).encode()


def _failed(webhook_id: str, token: str, *, seq: int, attempt: int, sent: Sent) -> str:
    """Record a failed attempt: due again after the schedule's next delay, or failing/disabled."""
    delays = get_settings().webhook_retry_delays
    reason = sent.error or f"the receiver answered {sent.status_code}"
    retry_in: float | None = None
    status = WebhookStatus.FAILING
    if sent.status_code == 410:
        status, reason = WebhookStatus.DISABLED, "the receiver answered 410 Gone"
    elif attempt <= len(delays):
        retry_in = delays[attempt - 1] * random.uniform(1.0, 1.2)  # jitter: receivers recovering are not stampeded
        retry_in = max(retry_in, sent.retry_after_s or 0.0)
    with transaction() as session:
        recorded = store.record_failure(
            session,
            webhook_id,
            token,
            seq=seq,
            retry_in_s=retry_in,
            status=status,
            reason=reason[:1000],
            public_reason=_public(sent),
        )
        if recorded:  # else deleted, or the claim was lost: the attempt that holds it now keeps the log
            line = DeliveryLine(seq, attempt, sent.status_code, sent.latency_ms, reason[:1000], retry_in)
            store.record_deliveries(session, webhook_id, [line])
    log.warning(
        "webhook %s: attempt %d at event %d failed (%s)",
        webhook_id,
        attempt,
        seq,
        reason[:200],
        extra={"action": "webhook", "webhook_id": webhook_id, "seq": seq},
    )
    return "retry" if retry_in is not None else str(status)
