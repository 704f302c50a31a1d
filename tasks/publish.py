"""Publish after commit: the continuation row is the outbox, this is the relay's fast path."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

from celery.utils.nodenames import worker_direct
from kombu.exceptions import OperationalError

from models.store import PUSH_NODE, Due
from parkway import tracing
from parkway.crash import crash_point
from tasks.celery_app import (
    CONTINUATIONS_QUEUE,
    DELIVER_WEBHOOK,
    PUSH_QUEUE,
    PUSH_STEP,
    RESUME_STEP,
    RUN_STEP,
    STEPS_QUEUE,
    WEBHOOKS_QUEUE,
    app,
)

log = logging.getLogger("parkway.publish")

# The message header of a delivery handed on by a worker that does not run its version (tasks.worker).
HANDED_ON = "parkway_handed_on"
TRACEPARENT = "traceparent"  # a message header: the publishing span, when traced


Item = Due | tuple[str, str]  # a continuation made due, or only its (id, kind)


def shown(item: Item) -> tuple[str, str, dict[str, str]]:
    """The continuation's id and kind, and how Flower shows its task: the id as its argument, and (for a
    ``Due``) the run, step and ``name@version`` it serves as keyword arguments it does not take, never a
    payload or an answer (``argsrepr``, ``kwargsrepr``)."""
    if isinstance(item, tuple):
        return item[0], item[1], {}
    serves = {"run_id": item.run_id, "step_id": item.step_id, "serves": item.name}
    return item.id, item.kind, {"argsrepr": repr([item.id]), "kwargsrepr": repr(serves)}


def publish(
    items: Iterable[Item],
    *,
    after_first: Callable[[], None] | None = None,
    retry: bool = True,
    node: str | None = None,
) -> int:
    """Send one task per continuation (a ``Due``, or its ``(id, kind)``); call only after the commit that
    created them.

    All sends share one producer (one broker connection for the batch). A send that the broker or the
    transport failed (``_broker_errors``) is logged at WARNING (ids only), never raised, and ends the
    batch: the rows are committed and the sweep sends them again; any other error is a bug, raised.
    ``retry=False`` (the answer, start and worker paths) makes one attempt: one connect, bounded by the
    broker's connect timeout, and no publish retry policy, so a broker outage costs a caller no more than
    that; the sweep keeps the app's bounded retry policy. A pooled connection the
    broker dropped since its last use (a broker restart, a connection closed by its operator) is found
    dead only by the send: the rest of the batch then goes once more on a new connection, so a live
    broker never leaves a continuation to the sweep. Returns how many were sent.
    ``node``: each to that worker's own queue instead, marked as handed on (``HANDED_ON``); a push handler's
    node (``push:<id>``): each as a ``parkway.push_step`` task on the push queue (``tasks.push``).
    """
    batch = list(items)
    if not batch:
        return 0
    sent = 0
    broker_errors = _broker_errors()
    pushed = node is not None and node.startswith(PUSH_NODE)
    headers: dict[str, Any] = {HANDED_ON: True} if node and not pushed else {}
    to = worker_direct(node) if headers else None
    context = tracing.traceparent()  # the publishing span's, a parent for PARKWAY_TRACE_WAITS=parent
    if context is not None:
        headers[TRACEPARENT] = context
    for last_try in (False, True):
        reused, dropped = False, (OperationalError,)
        try:
            with app.producer_or_acquire() as producer:
                connection = producer.connection
                reused, dropped = connection.connected, (OperationalError, *connection.recoverable_connection_errors)
                if not retry:
                    # Without this, the first send would reconnect for up to ``broker_connection_timeout``.
                    connection.ensure_connection(max_retries=0)
                for item in batch[sent:]:
                    crash_point("publish.before_send")
                    continuation_id, kind, reprs = shown(item)
                    name, queue = (RUN_STEP, STEPS_QUEUE) if kind == "start" else (RESUME_STEP, CONTINUATIONS_QUEUE)
                    if pushed:
                        name, queue = PUSH_STEP, PUSH_QUEUE
                    app.send_task(name, args=[continuation_id], queue=to or queue, producer=producer, retry=retry,
                                  headers=headers or None, **reprs)  # fmt: skip
                    sent += 1
                    if sent == 1 and after_first is not None:
                        after_first()
            return sent
        except broker_errors as exc:  # anything else is a bug, and surfaces as one
            if not last_try and reused and isinstance(exc, dropped):
                continue  # that pooled connection was dead: the next acquire connects anew
            # The rest of the batch would fail the same way (ids are the only arguments): leave it to the sweep.
            log.warning(
                "publish failed (%s: %s); the sweep will send %d continuation(s) again",
                type(exc).__name__,
                exc,
                len(batch) - sent,
                extra={"action": "publish", "continuation_ids": [shown(item)[0] for item in batch[sent:]]},
            )
            return sent
    return sent


def publish_webhooks(webhook_ids: list[str]) -> int:
    """Send ``parkway.deliver_webhook`` for each subscription, after the commit that made it due; a broker
    failure is one warning (ids only) and the sweep sends it again. Returns how many were sent."""
    sent = 0
    try:
        with app.producer_or_acquire() as producer:
            for webhook_id in webhook_ids:
                app.send_task(DELIVER_WEBHOOK, args=[webhook_id], queue=WEBHOOKS_QUEUE, producer=producer)
                sent += 1
    except _broker_errors() as exc:
        log.warning("publish of webhook deliveries failed (%s); the sweep will send them again", type(exc).__name__,
                    extra={"action": "publish", "webhook_ids": webhook_ids[sent:]})  # fmt: skip
    return sent


@cache
def _broker_errors() -> tuple[type[BaseException], ...]:
    """What a send raises when the broker or the way to it fails (kombu's, its transport's, the socket's):
    the only errors ``publish`` logs and leaves to the sweep."""
    connection = app.connection_for_write()  # not connected: its transport's error classes only
    return (OperationalError, OSError, *connection.connection_errors, *connection.channel_errors)
