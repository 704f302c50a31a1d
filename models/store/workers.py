"""What live workers run: each worker advertises its step names and continuation keys with a heartbeat on
the database's clock, and a version is judged runnable by what the fleet advertises, never by the registry
of the process that asks.

What served means, and from when a grace counts, is ``models.served``'s: work on a key nobody serves waits,
and fails closed only once its grace (``PARKWAY_VERSION_GRACE_S``) has run out while its fleet was up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import (
    Boolean,
    Select,
    String,
    any_,
    bindparam,
    case,
    delete,
    func,
    literal,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from models.clock import db_now
from models.fleet_view import WorkerView as WorkerView
from models.fleet_view import worker_view
from models.served import (
    ADVERTISED,
    PUSH_NODE,
    WORKERS,
    advertises,
    api_presence,
    fleet_of,
    grace_from,
    kind_of,
    live,
    presence_left,
    served,
    stamp_presence,
)
from models.status import ContinuationKind, ContinuationStatus
from models.store.driver import DriverStatement
from models.store.leases import may_lease, of_keys_served
from models.store.sql import CONT, RUN, Executor, by_name, word
from models.webhook_tables import PushHandler

FORGET_AFTER_S = 24 * 3600  # a worker that stopped heartbeating this long ago is no longer listed at all


@dataclass(frozen=True)
class Advert:
    """One worker process's advertisement: who it is and the sorted keys it runs."""

    id: str
    node: str
    pid: int
    steps: tuple[str, ...]
    continuations: tuple[str, ...]
    ttl_s: float  # live this long after each heartbeat
    remote: bool = False  # leases over HTTP (docs/worker-protocol.md): never handed work through Celery
    refresh_s: float = 0  # an unchanged advertisement younger than this is left as it is (nothing written)
    principal_id: str | None = None  # a remote worker's: work is routed to it only where it may lease

    @property
    def fleet(self) -> str | None:
        """The fleet whose presence it stamps (``models.served``); a push handler's row none."""
        return None if self.node.startswith(PUSH_NODE) else fleet_of(self.remote)


def _advertise() -> Any:
    keys = ARRAY(String(200))
    row = pg_insert(WORKERS).values(
        id=bindparam("id"), node=bindparam("node"), pid=bindparam("pid"), steps=bindparam("steps", type_=keys),
        continuations=bindparam("conts", type_=keys), started_at=db_now(), heartbeat_at=db_now(),
        expires_at=db_now("ttl_s"), remote=bindparam("remote"), principal_id=bindparam("principal_id"),
    )  # fmt: skip
    stale = WORKERS.c.heartbeat_at <= db_now("refresh_s")  # -refresh_s: older than the refresh interval
    changed = or_(
        WORKERS.c.steps.is_distinct_from(row.excluded.steps),
        WORKERS.c.continuations.is_distinct_from(row.excluded.continuations),
    )
    worker = row.on_conflict_do_update(
        index_elements=[WORKERS.c.id],
        set_={"heartbeat_at": db_now(), "expires_at": row.excluded.expires_at, "steps": row.excluded.steps,
              "continuations": row.excluded.continuations},
        where=or_(stale, changed),
    ).returning(WORKERS.c.id, WORKERS.c.expires_at).cte("worker")  # fmt: skip
    # In one order (kind, then the sorted keys), so two workers' upserts of the same rows never deadlock.
    remote = bindparam("remote", type_=Boolean)
    seen_rows = union_all(
        select(literal(ContinuationKind.START.value), func.unnest(bindparam("steps", type_=keys)), db_now(), remote),
        select(literal(ContinuationKind.RESUME.value), func.unnest(bindparam("conts", type_=keys)), db_now(), remote),
    )
    upsert = pg_insert(ADVERTISED).from_select(["kind", "key", "last_seen_at", "remote"], seen_rows)
    seen = upsert.on_conflict_do_update(
        index_elements=[ADVERTISED.c.kind, ADVERTISED.c.key],
        set_={"last_seen_at": upsert.excluded.last_seen_at, "remote": upsert.excluded.remote},
        where=or_(ADVERTISED.c.last_seen_at <= db_now("refresh_s"), ADVERTISED.c.remote != upsert.excluded.remote),
    ).cte("seen")
    fleet = bindparam("fleet", type_=String)
    present = stamp_presence(fleet, worker.c.expires_at, fleet.is_not(None))
    forgotten = delete(WORKERS).where(WORKERS.c.expires_at < db_now(-FORGET_AFTER_S)).cte("forgotten")
    # Read in the statement's snapshot, so before its upsert: the worker was not listed live until now.
    was_live = select(WORKERS.c.id).where(WORKERS.c.id == bindparam("id"), live()).exists()
    return select(worker.c.id, (~was_live).label("back")).add_cte(seen, present.cte("present"), forgotten)


_ADVERTISE = DriverStatement(_advertise)


def advertise(conn: Executor, advert: Advert) -> bool:
    """none|live|expired -> live for the worker ``advert.id``, its keys replaced and its heartbeat stamped;
    each key's ``last_seen_at`` -> now; its fleet present (``models.served.stamp_presence``). One statement:
    the start and every heartbeat (a worker whose row was forgotten, or whose heartbeats stopped for a while,
    is simply live again). A row (or key) stamped
    within ``advert.refresh_s`` and serving the same keys is left as it is. ``True`` when the worker is back:
    it was not listed live before this call (what was made meanwhile may be routed to it: ``route_to_remote``)."""
    params = {"id": advert.id, "node": advert.node, "pid": advert.pid, "steps": list(advert.steps),
              "conts": list(advert.continuations), "ttl_s": advert.ttl_s, "remote": advert.remote,
              "refresh_s": -advert.refresh_s, "principal_id": advert.principal_id,
              "fleet": advert.fleet}  # fmt: skip
    return any(row.back for row in _ADVERTISE.rows(conn, params))


def withdraw(conn: Executor, worker_id: str) -> bool:
    """live -> gone for a worker stopping warmly: it no longer serves anything (its keys keep their
    ``last_seen_at``, from which the grace counts), and its fleet is present only as long as its other live
    workers are (``models.served.presence_left``). ``False`` when it was not listed."""
    gone = conn.execute(delete(WORKERS).where(WORKERS.c.id == worker_id).returning(WORKERS.c.node, WORKERS.c.remote))
    row = gone.first()
    if row is not None and not row.node.startswith(PUSH_NODE):
        conn.execute(presence_left(fleet_of(row.remote)))
    return row is not None


@cache
def _workers_listed() -> Any:
    return (
        select(WORKERS.c.node, kind_of(), *(WORKERS.c[c] for c in ("pid", "steps", "continuations", "started_at",
                                                                  "heartbeat_at", "remote")))
        .where(live())
        .order_by(WORKERS.c.node)
    )  # fmt: skip


def live_workers(session: Session) -> list[WorkerView]:
    """The live workers, by node name."""
    return [worker_view(row) for row in session.execute(_workers_listed())]


def unserved_reason(kind: str, key: str, last_seen_at: datetime | None) -> str:
    """Why work on ``key`` fails closed: the version named, and since when nothing has advertised it."""
    what = "step" if kind == ContinuationKind.START else "continuation version"
    if last_seen_at is None:
        return f"{what} {key}: no live worker has ever advertised it"
    return f"{what} {key}: no live worker has advertised it since {last_seen_at:%Y-%m-%dT%H:%M:%SZ}"


@dataclass(frozen=True)
class Serving:
    """What the fleet says of one key, read in one statement."""

    kind: str
    key: str
    node: str | None  # a live Celery worker that runs it, to hand work on to; None: no live one does
    remote: bool  # a live remote worker serves it that may lease the work (it leases it over HTTP)
    offer: str | None  # a push handler's node to offer the work to although none serves it now, or None
    anyone_live: bool
    last_seen_at: datetime | None
    grace_from: datetime | None  # ``models.served.grace_from``: None while its fleet is absent
    now: datetime

    @property
    def served(self) -> bool:
        """A live worker runs it, in Celery or remotely."""
        return self.node is not None or self.remote

    def fails_closed(self, grace_s: float) -> str | None:
        """The reason work on this key fails closed now, or ``None``: a live worker runs it, its fleet is
        absent (the work waits), or its grace has not run out."""
        if self.served or self.grace_from is None or self.grace_from > self.now - timedelta(seconds=grace_s):
            return None
        return unserved_reason(self.kind, self.key, self.last_seen_at)


def offered_handlers(kind: str, key: Any) -> Select[Any]:
    """The registered push handlers of ``key`` (a str or an expression) that have not refused it (a 410 took it
    out of their row, ``models.store.push.refuse``), by ``rank``: live ones first, then the oldest. Work on a
    key goes to one of them although none is live (its success makes it live again: ``push.accepted``)."""
    handler = PushHandler.__table__.c
    key = literal(key) if isinstance(key, str) else key
    row = (WORKERS.c.id == handler.id,)
    refused = select(WORKERS.c.id).where(*row, ~advertises(kind, key)).exists()
    first = (case((select(WORKERS.c.id).where(*row, live()).exists(), 0), else_=1), handler.created_at, handler.id)
    return select(handler.id, func.row_number().over(order_by=first).label("rank")).where(
        key == any_(handler.serves), ~refused
    )


@cache
def _serving(kind: str) -> Any:
    key: Any = bindparam("key")
    offered = offered_handlers(kind, key).subquery()
    offer = select(literal(PUSH_NODE) + offered.c.id).order_by(offered.c.rank).limit(1)
    node = (
        select(WORKERS.c.node).where(live(), advertises(kind, key), ~WORKERS.c.remote).order_by(func.random()).limit(1)
    )
    # The target of the work asked about (``:cid``'s run); NULL when none is: then any remote worker serves it.
    of_run = select(RUN.c.target).join(CONT, CONT.c.run_id == RUN.c.id).where(CONT.c.id == bindparam("cid"))
    target = of_run.scalar_subquery()
    leasable = or_(target.is_(None), may_lease(WORKERS.c.principal_id, target))
    this_key = (ADVERTISED.c.kind == kind, ADVERTISED.c.key == key)
    seen = select(ADVERTISED.c.last_seen_at).where(*this_key).scalar_subquery()
    by_remote = select(ADVERTISED.c.remote).where(*this_key).scalar_subquery()
    since = func.coalesce(select(CONT.c.created_at).where(CONT.c.id == bindparam("cid")).scalar_subquery(), db_now())
    return select(
        node.scalar_subquery().label("node"),
        served(kind, key, WORKERS.c.remote, leasable).label("remote"),
        offer.scalar_subquery().label("offer"),
        select(WORKERS.c.id).where(live()).exists().label("anyone_live"),
        seen.label("last_seen_at"),
        grace_from(seen, since, by_remote).label("grace_from"),
        db_now().label("now"),
    )


# What the generated SQL's test reads by name (models/fleet_sql.py, models/start_sql.py).
__getattr__ = by_name(
    LIVE_WORKERS=_workers_listed, _SERVING=lambda: {kind: _serving(kind) for kind in ContinuationKind}
)


def serving(session: Executor, kind: str, key: str, *, continuation_id: str | None = None) -> Serving:
    """Who runs ``key`` (a step name for ``start``, ``name@version`` for ``resume``); the work began waiting
    when the continuation ``continuation_id`` was made, or now."""
    row = session.execute(_serving(ContinuationKind(kind)), {"key": key, "cid": continuation_id}).one()
    return Serving(kind, key, row.node, bool(row.remote), row.offer, bool(row.anyone_live), row.last_seen_at,
                   row.grace_from, row.now)  # fmt: skip


def api_heartbeat(conn: Executor, ttl_s: float) -> None:
    """The API is up for ``ttl_s`` more seconds: the remote fleet's presence (``models.served.api_presence``)."""
    conn.execute(api_presence(), {"ttl_s": ttl_s})


def ever_advertised(conn: Executor, kind: str, key: str) -> bool:
    """Some worker has advertised ``key`` at some time (a start of a step none ever did is a typo)."""
    seen = select(ADVERTISED.c.key).where(ADVERTISED.c.kind == kind, ADVERTISED.c.key == key).exists()
    return bool(conn.execute(select(seen)).scalar())


def remote_only(kind: Any, key: Any, target: Any) -> Any:
    """Work on ``key`` of a run on ``target`` is for remote workers: no live Celery worker runs it, and a live
    remote worker that may lease it does (``parkway_remote_only``, migration 0027, the function the closing of a
    wait calls too). Decided when the continuation is made (``models.store.runs.ready_continuation``) and
    again whenever the sweep re-routes it (``models.store.sweep``)."""
    return func.parkway_remote_only(literal(kind.value) if isinstance(kind, ContinuationKind) else kind, key, target)


def now_remote_only() -> Any:
    """The continuation row (of ``CONT`` in the statement) is for remote workers now: ``remote_only`` of its
    kind, its key and its run's target. The sweep's re-route and ``route_to_remote`` decide by it."""
    target = select(RUN.c.target).where(RUN.c.id == CONT.c.run_id).correlate_except(RUN).scalar_subquery()
    return remote_only(CONT.c.kind, CONT.c.name, target)


@cache
def _route_to_remote() -> Any:
    return (
        update(CONT)
        .where(CONT.c.status == word(ContinuationStatus.READY), ~CONT.c.remote, of_keys_served(), now_remote_only())
        .values(remote=True)
        .returning(CONT.c.id)
    )


def route_to_remote(conn: Executor, *, steps: list[str], continuations: list[str]) -> int:
    """ready (for Celery) -> ready for remote workers' leases, for the continuations of these keys that only
    remote workers serve now (``remote_only``, the rule the answer and the sweep route by): what was made while
    no worker of its key was live, once a remote worker that serves it is back (its lease call), rather than
    when the sweep next re-routes it. A Celery delivery of one still queued then claims nothing (remote work
    is never claimed by Celery). How many were routed."""
    return len(conn.execute(_route_to_remote(), {"steps": steps, "conts": continuations}).all())


def sorted_keys(keys: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(set(keys)))
