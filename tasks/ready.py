"""Publishing what ``parkway run start`` committed: a start from the shell imports no broker client
(``models.run_start``), so it leaves its run's first continuation unpublished and notifies ``READY_CHANNEL``
as it commits. Each worker listens on a connection of its own, read on the worker's timer in its main
process; on a notification it marks the ready continuations never published, with the sweep's
compare-and-set (one worker wins each), and publishes them. A notification no worker heard (none was
listening, or its connection was being made again) leaves them to the sweep's next pass.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import bootsteps

from models import store
from models.run_start import READY_CHANNEL
from parkway import pgconn
from parkway.db import database_unavailable, failure_line, transaction
from tasks.publish import publish

log = logging.getLogger("parkway.worker")

POLL_S = 0.2  # how often the listening connection is read: at most this is added to a shell start's latency
RETRY_S = 5.0  # after a failure, the connection is made again no sooner than this
BATCH = 100
NEVER_PUBLISHED = 1e9  # seconds: older than any stamp, so only continuations never published are marked


def publish_unpublished() -> int:
    """ready -> ready, stamped and published: the continuations committed ready but never published (at most
    ``BATCH``); returns how many were sent."""
    with transaction() as session:
        due = store.mark_for_republish(session, older_than_s=NEVER_PUBLISHED, batch=BATCH)
    return publish(due, retry=False)  # once: the sweep relays a lost publish


class ReadyListener(bootsteps.StartStopStep):  # type: ignore[misc]
    """A worker bootstep: ``LISTEN`` on ``READY_CHANNEL`` while the worker runs. A forked pool child inherits
    the connection and never uses or closes it (it runs no bootstep's ``stop``, and exits without
    finalizers)."""

    requires = ("celery.worker.components:Timer",)

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        self.conn: Any = None
        self.tref: Any = None
        self.failing = False
        self.retry_at = 0.0
        super().__init__(worker, **kwargs)

    def start(self, worker: Any) -> None:
        self.tref = worker.timer.call_repeatedly(POLL_S, self.poll)

    def stop(self, worker: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
        self._close()

    def poll(self) -> None:
        """Publish what was notified since the last read (after a new connection: what was committed while
        none listened). A failure is one line until it recovers; the connection is made again ``RETRY_S``
        later."""
        if time.monotonic() < self.retry_at:
            return
        try:
            if self.conn is None:
                self.conn = pgconn.listening(READY_CHANNEL)
                notified = True
            else:
                notified = any(True for _ in self.conn.notifies(timeout=0))
            if notified:
                publish_unpublished()
            self.failing = False
        except Exception as exc:
            if not self.failing:
                log.warning("could not publish the continuations started from the shell (the sweep will): %s",
                            failure_line(exc), exc_info=not database_unavailable(exc))  # fmt: skip
            self.failing = True
            self.retry_at = time.monotonic() + RETRY_S
            self._close()

    def _close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()  # a broken one too: psycopg closes it without raising
