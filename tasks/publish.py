"""Publish after commit: the continuation row is the outbox, this is the relay's fast path."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from parkway.crash import crash_point
from tasks.celery_app import CONTINUATIONS_QUEUE, RESUME_STEP, RUN_STEP, STEPS_QUEUE, app

log = logging.getLogger("parkway.publish")


def publish(items: Iterable[tuple[str, str]]) -> int:
    """Send one task per ``(continuation_id, kind)``; call only after the commit that created them.

    A failed send is logged, not raised: the row is committed and the sweep will send it again.
    Returns how many were sent.
    """
    sent = 0
    for continuation_id, kind in items:
        crash_point("publish.before_send")
        name, queue = (RUN_STEP, STEPS_QUEUE) if kind == "start" else (RESUME_STEP, CONTINUATIONS_QUEUE)
        try:
            app.send_task(name, args=[continuation_id], queue=queue)
            sent += 1
        except Exception:
            log.warning(
                "publish failed; the sweep will send it again",
                exc_info=True,
                extra={"action": "publish", "continuation_id": continuation_id},
            )
    return sent
