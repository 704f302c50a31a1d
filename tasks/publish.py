"""Publish after commit: the continuation row is the outbox, this is the relay's fast path."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from parkway.crash import crash_point
from tasks.celery_app import CONTINUATIONS_QUEUE, RESUME_STEP, RUN_STEP, STEPS_QUEUE, app

log = logging.getLogger("parkway.publish")


def publish(items: Iterable[tuple[str, str]], *, after_first: Callable[[], None] | None = None) -> int:
    """Send one task per ``(continuation_id, kind)``; call only after the commit that created them.

    All sends share one producer (one broker connection for the batch). A failed send is logged, not
    raised: the row is committed and the sweep will send it again. Returns how many were sent.
    """
    batch = list(items)
    if not batch:
        return 0
    sent = 0
    try:
        with app.producer_or_acquire() as producer:
            for index, (continuation_id, kind) in enumerate(batch):
                crash_point("publish.before_send")
                name, queue = (RUN_STEP, STEPS_QUEUE) if kind == "start" else (RESUME_STEP, CONTINUATIONS_QUEUE)
                try:
                    app.send_task(name, args=[continuation_id], queue=queue, producer=producer)
                    sent += 1
                except Exception:
                    log.warning(
                        "publish failed; the sweep will send it again",
                        exc_info=True,
                        extra={"action": "publish", "continuation_id": continuation_id},
                    )
                if index == 0 and after_first is not None:
                    after_first()
    except Exception:
        log.warning("no broker connection to publish on; the sweep will send these again", exc_info=True)
    return sent
