"""This worker's place in the fleet: it advertises the step names and continuation keys it runs at start
(before it takes any task, so its startup sweep already counts it), renews that on a heartbeat, and
withdraws it on a warm shutdown (``models.store.workers``).

The heartbeat runs on the worker's own timer in its main process (the event loop's, or the pool's timer
thread): no thread of ours is alive when the pool forks its children.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import bootsteps

from models import store
from models.status import ContinuationKind
from parkway import identity
from parkway.db import database_unavailable, failure_line, single_statement
from parkway.settings import get_settings
from tasks import registry

log = logging.getLogger("parkway.worker")

LIVE_HEARTBEATS = 3  # a worker stays live this many heartbeats after each one


class Advertiser:
    """The advertisement of this process, made once its workflow modules are imported."""

    def __init__(self, node: str) -> None:
        interval = get_settings().worker_heartbeat_s
        self.interval_s = interval
        self.advert = store.Advert(
            id=store.new_id(),
            node=node,
            pid=os.getpid(),
            steps=tuple(sorted(registry.keys(ContinuationKind.START))),
            continuations=tuple(sorted(registry.keys(ContinuationKind.RESUME))),
            ttl_s=LIVE_HEARTBEATS * interval,
        )

    def advertise(self) -> None:
        with single_statement() as conn:
            store.advertise(conn, self.advert)

    def heartbeat(self) -> None:
        """One heartbeat; a failed one is a line (the next may succeed before this one's ttl runs out)."""
        try:
            self.advertise()
        except Exception as exc:
            unavailable = database_unavailable(exc)
            log.warning("worker heartbeat failed%s", f": {failure_line(exc)}" if unavailable else "",
                        exc_info=not unavailable, extra={"action": "heartbeat"})  # fmt: skip

    def withdraw(self) -> None:
        try:
            with single_statement() as conn:
                store.withdraw(conn, self.advert.id)
        except Exception as exc:  # its heartbeat runs out instead
            log.warning("could not withdraw this worker's advertisement: %s", failure_line(exc))


_advertiser: Advertiser | None = None


def start(node: str, *, serving: bool = True) -> Advertiser | None:
    """Advertise this worker now (``worker_init``: imports done, no task taken yet); raises what the
    database raised, so a worker that cannot say what it runs does not start. ``serving=False`` (the
    outbound worker): it runs no bodies, so it advertises nothing."""
    global _advertiser
    identity.name_node(node)  # the runs this worker ends read "finished by <node> pid <pid>"
    if not serving:
        return None
    _advertiser = Advertiser(node)
    _advertiser.advertise()
    log.info(
        "advertised %d steps and %d continuation versions as %s",
        len(_advertiser.advert.steps),
        len(_advertiser.advert.continuations),
        node,
        extra={"action": "advertise"},
    )
    return _advertiser


class Heartbeat(bootsteps.StartStopStep):  # type: ignore[misc]
    """A worker bootstep: the advertisement's heartbeat while the worker runs, its withdrawal at a warm stop."""

    requires = ("celery.worker.components:Timer",)

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        self.tref: Any = None
        super().__init__(worker, **kwargs)

    def start(self, worker: Any) -> None:
        if _advertiser is not None:
            self.tref = worker.timer.call_repeatedly(_advertiser.interval_s, _advertiser.heartbeat)

    def stop(self, worker: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
        if _advertiser is not None:
            _advertiser.withdraw()
