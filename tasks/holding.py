"""How an execution holds its continuation while the body runs: a lease, renewed by one thread per
process, and checked by each of the SDK's own writes (``own_write``). No transaction stays open across a
body: an open one would hold back what other readers may be shown of the event log."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import psycopg
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from models import store
from models.store import Claim
from parkway.db import database_unavailable, failure_line, single_statement, transaction

if TYPE_CHECKING:
    from tasks.sdk import Context

log = logging.getLogger("parkway.worker")


class Hold:
    """One execution's claim on its continuation, under a lease of ``lease_s``."""

    def __init__(self, claim: Claim, execution_id: str, lease_s: float) -> None:
        self.claim, self.execution_id, self.lease_s = claim, execution_id, lease_s

    def renew(self) -> bool:
        """The lease extended; ``False`` once this execution holds it no more.

        One statement in autocommit: a process stopped mid-renewal (hung, paused) leaves no open
        transaction holding the row, so the sweep can release the claim once the lease runs out."""
        with single_statement(durable=False) as conn:
            renewed = store.renew_lease(
                conn, self.claim.continuation.id, execution_id=self.execution_id, lease_s=self.lease_s
            )
        return renewed is not None


class _Renewer:
    """One thread per process keeps the holds of the executions running in it: each lease renewed every
    third of its lease. A thread per execution would cost a start and a join.

    A hold wakes the thread only when it falls due before the thread's current wait ends. With nothing
    held the thread waits as long as the last hold's first turn (a third of its lease), not longer: a
    body that ends in milliseconds (the common case) then never wakes it.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.held: dict[str, tuple[Hold, float]] = {}  # continuation -> (hold, when it is next due)
        self.pid: int | None = None
        self.sleeps_until = 0.0  # when the thread's current wait ends (monotonic)
        self.idle_s = 60.0  # how long the thread waits with nothing held: the last hold's first turn

    def hold(self, hold: Hold, due_in_s: float) -> None:
        with self.lock:
            if self.pid != os.getpid():  # first use in this process (a forked pool child has no thread)
                self.pid, self.held, self.sleeps_until = os.getpid(), {}, 0.0
                threading.Thread(target=self._loop, name="parkway-lease", daemon=True).start()
            due = time.monotonic() + due_in_s
            self.held[hold.claim.continuation.id] = (hold, due)
            self.idle_s = due_in_s
            sooner = due < self.sleeps_until  # else the thread wakes in time anyway: no wake-up per execution
        if sooner:
            self.wake.set()

    def release(self, continuation_id: str) -> None:
        with self.lock:
            self.held.pop(continuation_id, None)

    def _loop(self) -> None:
        while True:
            now = time.monotonic()
            with self.lock:
                due = [h for h, at in self.held.values() if at <= now]
                for h in due:
                    self.held[h.claim.continuation.id] = (h, now + h.lease_s / 3)
                nxt = min((at for _, at in self.held.values()), default=now + self.idle_s)
                self.sleeps_until = nxt
            for h in due:
                self._renew(h)
            self.wake.wait(max(0.0, nxt - time.monotonic()))
            with self.lock:
                self.wake.clear()
                self.sleeps_until = 0.0  # awake: a hold now must not count on this wait

    def _renew(self, hold: Hold) -> None:
        cid = hold.claim.continuation.id
        try:
            held = hold.renew()
        except Exception as exc:
            unavailable = database_unavailable(exc)  # an outage, or a session the database ended: one line
            log.warning("lease renewal failed%s", f": {failure_line(exc)}" if unavailable else "",
                        exc_info=not unavailable, extra={"continuation_id": cid})  # fmt: skip
            return  # tried again at its next turn, while the lease is live
        if not held:
            with self.lock:
                if self.held.get(cid, (None,))[0] is hold:
                    del self.held[cid]


renewer = _Renewer()


class Keeper:
    """Keeps ``hold`` while the body runs (see ``_Renewer``): its lease renewed every third of it."""

    def __init__(self, hold: Hold) -> None:
        self.hold = hold

    def __enter__(self) -> Keeper:
        renewer.hold(self.hold, self.hold.lease_s / 3)
        return self

    def __exit__(self, *_: object) -> None:
        renewer.release(self.hold.claim.continuation.id)


class Stopped(BaseException):  # control flow: a body's ``except Exception`` must not eat it
    """This execution stops here and commits nothing: it no longer holds a live claim, or the database
    failed under one of its own writes (the SDK's inside the body, or the outcome's commit). The system's
    fault, never the workflow's verdict: the continuation is driven again, as after a crash (a tool call
    it journaled is then replayed by its kind's rule), and out of attempts its run is ``interrupted``."""


# What the database and its driver raise (SQLAlchemy wraps psycopg's errors; a raw one is a driver call).
DATABASE_ERRORS = (SQLAlchemyError, psycopg.Error)


def fault_line(exc: BaseException) -> str:
    """A database error by its classes and SQLSTATE, never its text (which may quote the parameters)."""
    orig = getattr(exc, "orig", None)
    if not isinstance(orig, psycopg.Error):
        return type(exc).__name__
    state = f", SQLSTATE {orig.sqlstate}" if orig.sqlstate else ""
    return f"{type(exc).__name__} ({type(orig).__name__}{state})"


def database_fault(exc: BaseException, what: str) -> Stopped:
    """The ``Stopped`` for a database error raised under ``what``."""
    return Stopped(f"the database failed under {what}: {fault_line(exc)}")


@contextmanager
def own_write(ctx: Context, *, fenced: bool = True) -> Iterator[Session]:
    """The transaction of one of the SDK's own writes for the body of ``ctx`` (a tool call's journal, a
    review). ``fenced``: it commits only while this execution holds a live claim
    (``store.holds_live_claim``), so an execution that lost it starts no tool call and records no review.
    A lost claim or any database error (an outage, a deadlock, a constraint) raises ``Stopped``, never
    the body's ``Fail``."""
    try:
        with transaction() as session:
            if fenced and not store.holds_live_claim(session, ctx.execution_id):
                raise Stopped("its claim's lease ran out (or another execution took it over)")
            yield session
    except DATABASE_ERRORS as exc:
        raise database_fault(exc, "the SDK's own write") from exc
