"""What live workers run: each worker advertises its step names and continuation keys with a heartbeat on
the database's clock, and a version is judged runnable by what the fleet advertises, never by the registry
of the process that asks.

A key is served while a live worker (``expires_at`` ahead of the database's clock) advertises it. Work on a
key nobody serves fails closed only once no live worker has advertised it for the grace
(``PARKWAY_VERSION_GRACE_S``), counted from its last advertisement, or from when the work began waiting on it
if none ever did; with no live worker at all, nothing fails closed: the work waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import String, Table, any_, bindparam, delete, exists, func, literal, or_, select, union_all
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from models.clock import db_now
from models.fleet_tables import AdvertisedVersion, Worker
from models.status import ContinuationKind
from models.store.driver import DriverStatement
from models.store.leases import may_lease
from models.store.sql import CONT, RUN, Executor

WORKERS = cast(Table, Worker.__table__)
ADVERTISED = cast(Table, AdvertisedVersion.__table__)
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


def live() -> Any:
    """A worker whose heartbeat has not run out by the database's clock."""
    return WORKERS.c.expires_at > db_now()


def advertises(kind: str, key: Any) -> Any:
    """The worker row advertises ``key`` (an expression) as a step (``start``) or a continuation (``resume``)."""
    return key == any_(WORKERS.c.steps if kind == ContinuationKind.START else WORKERS.c.continuations)


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
    ).returning(WORKERS.c.id).cte("worker")  # fmt: skip
    # In one order (kind, then the sorted keys), so two workers' upserts of the same rows never deadlock.
    seen_rows = union_all(
        select(literal(ContinuationKind.START.value), func.unnest(bindparam("steps", type_=keys)), db_now()),
        select(literal(ContinuationKind.RESUME.value), func.unnest(bindparam("conts", type_=keys)), db_now()),
    )
    upsert = pg_insert(ADVERTISED).from_select(["kind", "key", "last_seen_at"], seen_rows)
    seen = upsert.on_conflict_do_update(
        index_elements=[ADVERTISED.c.kind, ADVERTISED.c.key],
        set_={"last_seen_at": upsert.excluded.last_seen_at},
        where=ADVERTISED.c.last_seen_at <= db_now("refresh_s"),
    ).cte("seen")
    forgotten = delete(WORKERS).where(WORKERS.c.expires_at < db_now(-FORGET_AFTER_S)).cte("forgotten")
    return select(worker.c.id).add_cte(seen, forgotten)


_ADVERTISE = DriverStatement(_advertise())


def advertise(conn: Executor, advert: Advert) -> None:
    """none|live|expired -> live for the worker ``advert.id``, its keys replaced and its heartbeat stamped;
    each key's ``last_seen_at`` -> now. One statement: the start and every heartbeat (a worker whose row
    was forgotten, or whose heartbeats stopped for a while, is simply live again). A row (or key) stamped
    within ``advert.refresh_s`` and serving the same keys is left as it is."""
    params = {"id": advert.id, "node": advert.node, "pid": advert.pid, "steps": list(advert.steps),
              "conts": list(advert.continuations), "ttl_s": advert.ttl_s, "remote": advert.remote,
              "refresh_s": -advert.refresh_s, "principal_id": advert.principal_id}  # fmt: skip
    _ADVERTISE.rows(conn, params)


def withdraw(conn: Executor, worker_id: str) -> bool:
    """live -> gone for a worker stopping warmly: it no longer serves anything (its keys keep their
    ``last_seen_at``, from which the grace counts). ``False`` when it was not listed."""
    gone = conn.execute(delete(WORKERS).where(WORKERS.c.id == worker_id).returning(WORKERS.c.id)).first()
    return gone is not None


@dataclass(frozen=True)
class WorkerView:
    node: str
    pid: int
    steps: list[str]
    continuations: list[str]
    started_at: datetime
    heartbeat_at: datetime
    remote: bool


def live_workers(session: Session) -> list[WorkerView]:
    """The live workers, by node name."""
    columns = ("node", "pid", "steps", "continuations", "started_at", "heartbeat_at", "remote")
    rows = session.execute(select(*(WORKERS.c[c] for c in columns)).where(live()).order_by(WORKERS.c.node))
    return [WorkerView(*row) for row in rows]


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
    anyone_live: bool
    last_seen_at: datetime | None
    since: datetime  # when the work began waiting on it (the grace counts from here if never advertised)
    now: datetime

    @property
    def served(self) -> bool:
        """A live worker runs it, in Celery or remotely."""
        return self.node is not None or self.remote

    def fails_closed(self, grace_s: float) -> str | None:
        """The reason work on this key fails closed now, or ``None``: a live worker runs it, no worker is
        alive at all (the work waits), or it was advertised (or the work began) within the grace."""
        if self.served or not self.anyone_live:
            return None
        if (self.last_seen_at or self.since) > self.now - timedelta(seconds=grace_s):
            return None
        return unserved_reason(self.kind, self.key, self.last_seen_at)


def _serving(kind: str) -> Any:
    key: Any = bindparam("key")
    node = (
        select(WORKERS.c.node).where(live(), advertises(kind, key), ~WORKERS.c.remote).order_by(func.random()).limit(1)
    )
    # The target of the work asked about (``:cid``'s run); NULL when none is: then any remote worker serves it.
    of_run = select(RUN.c.target).join(CONT, CONT.c.run_id == RUN.c.id).where(CONT.c.id == bindparam("cid"))
    target = of_run.scalar_subquery()
    leasable = or_(target.is_(None), may_lease(WORKERS.c.principal_id, target))
    remote = exists().where(live(), advertises(kind, key), WORKERS.c.remote, leasable)
    seen = select(ADVERTISED.c.last_seen_at).where(ADVERTISED.c.kind == kind, ADVERTISED.c.key == key)
    since = select(CONT.c.created_at).where(CONT.c.id == bindparam("cid"))
    return select(
        node.scalar_subquery().label("node"),
        remote.label("remote"),
        exists().where(live()).label("anyone_live"),
        seen.scalar_subquery().label("last_seen_at"),
        func.coalesce(since.scalar_subquery(), db_now()).label("since"),
        db_now().label("now"),
    )


_SERVING = {kind: _serving(kind) for kind in ContinuationKind}


def serving(session: Executor, kind: str, key: str, *, continuation_id: str | None = None) -> Serving:
    """Who runs ``key`` (a step name for ``start``, ``name@version`` for ``resume``); the work began waiting
    when the continuation ``continuation_id`` was made, or now."""
    row = session.execute(_SERVING[ContinuationKind(kind)], {"key": key, "cid": continuation_id}).one()
    return Serving(kind, key, row.node, bool(row.remote), bool(row.anyone_live), row.last_seen_at, row.since, row.now)


def remote_only(kind: str, key: Any, target: Any) -> Any:
    """Work on ``key`` of a run on ``target`` is for remote workers: no live Celery worker runs it, and a
    remote worker that may lease it advertised it (its row is kept for ``FORGET_AFTER_S`` after its last lease
    call: a remote agent's restart does not send its work to Celery); one that may not routes it nothing.
    Decided when the continuation is made (``models.store.runs.ready_continuation``)."""
    python = exists().where(live(), advertises(kind, key), ~WORKERS.c.remote)
    return ~python & exists().where(advertises(kind, key), WORKERS.c.remote, may_lease(WORKERS.c.principal_id, target))


def sorted_keys(keys: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(set(keys)))
