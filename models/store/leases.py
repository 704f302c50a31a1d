"""Remote leases: a remote worker's claim of continuations it serves, of runs on targets it may lease, taken
over HTTP (docs/worker-protocol.md).

A lease is a claim (``models.store.claims``): the row is ``claimed`` with ``claimed_by`` = the lease id
(``<continuation id>.<nonce>``), and the lease's row in ``leases`` names its holder, the principal whose lease
call took it. Every later call on a lease reads it by its whole id, for its holder alone (``held_by``), even
after another lease took its work over. Renewal, release and the consume are the claims' own transitions,
keyed by the lease id as the execution id; a completion's receipt is written in the consume's transaction
(``models.store.outcomes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, cast

from sqlalchemy import (
    ARRAY,
    Connection,
    Integer,
    String,
    Table,
    and_,
    any_,
    bindparam,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from models.clock import db_now
from models.derived import run_status
from models.fleet_tables import Lease, LeaseReceipt
from models.status import ContinuationKind, ContinuationStatus, PrincipalKind
from models.store.claims import Claim, Claimed, claimable, claims_of, live_claim, with_context
from models.store.driver import DriverStatement
from models.store.principals import live_grant
from models.store.sql import CONT, PRIN, RUN, Executor, word, words

RECEIPTS = cast(Table, LeaseReceipt.__table__)
LEASES = cast(Table, Lease.__table__)
_KEYS = ARRAY(String(200))


def continuation_of(lease_id: str) -> str:
    """The continuation a lease id names (its part before the dot): only for a lease id whose holder was
    checked (``held_by``), or one Parkway made itself (a push's)."""
    return lease_id.partition(".")[0]


def may_lease(principal_id: Any, target: Any) -> Any:
    """Whether ``principal_id`` may lease the work of runs on ``target`` (both expressions): a live admin
    (every target), or a live grant on it (``live_grant``: the rule of reads and answers)."""
    admin = exists().where(PRIN.c.id == principal_id, PRIN.c.kind == word(PrincipalKind.ADMIN),
                           PRIN.c.disabled_at.is_(None)).correlate_except(PRIN)  # fmt: skip
    return or_(admin, live_grant(principal_id, target))


_HELD, _HELD_RUN = CONT.alias("held"), RUN.alias("held_run")


def held_by(lease_id: Any, holder: Any) -> Any:
    """The continuation of the lease ``lease_id`` (its whole id) when ``holder`` took it and may still lease
    its run's work (``may_lease``: a revoked grant ends the leases in hand at once), else NULL: what every call
    on a lease reads its work by."""
    mine = and_(LEASES.c.id == lease_id, LEASES.c.principal_id == holder)
    return (
        select(LEASES.c.continuation_id)
        .join(_HELD, _HELD.c.id == LEASES.c.continuation_id)
        .join(_HELD_RUN, _HELD_RUN.c.id == _HELD.c.run_id)
        .where(mine, may_lease(holder, _HELD_RUN.c.target))
        .scalar_subquery()
    )


def of_keys_served() -> Any:
    """The continuation is of a key served: a step name of ``:steps`` (a start) or a ``name@version`` of
    ``:conts`` (a resume)."""
    return or_(
        and_(CONT.c.kind == word(ContinuationKind.START), CONT.c.name == any_(bindparam("steps", type_=_KEYS))),
        and_(CONT.c.kind == word(ContinuationKind.RESUME), CONT.c.name == any_(bindparam("conts", type_=_KEYS))),
    )


def _lease() -> Any:
    """Up to ``:n`` remote continuations of the keys served (``:steps`` for starts, ``:conts`` for resumes)
    of runs on targets ``:pid`` may lease, ready or under an expired lease, attempts left, oldest first
    (``ix_continuations_remote``), skipping rows another lease call holds -> claimed, attempts + 1, each
    under a lease id of its own."""
    served = of_keys_served()
    left = CONT.c.attempts < bindparam("max_attempts")
    live = CONT.c.status.in_(words((ContinuationStatus.READY, ContinuationStatus.CLAIMED)))
    # Every key served, as one array: the index's condition (``served`` then tells starts from resumes).
    keys = CONT.c.name == any_(func.array_cat(bindparam("steps", type_=_KEYS), bindparam("conts", type_=_KEYS)))
    granted = may_lease(bindparam("pid", type_=String), RUN.c.target)
    oldest = (
        select(CONT.c.id)
        .join(RUN, RUN.c.id == CONT.c.run_id)
        .where(CONT.c.remote, live, keys, claimable(), left, served, granted)
        .order_by(CONT.c.created_at)
    )
    # Only the continuations are locked: a run's own writers never wait for a lease call.
    batch = oldest.limit(bindparam("n", type_=Integer)).with_for_update(of=CONT, skip_locked=True).cte("batch")
    nonce = func.substr(func.md5(func.random().cast(String) + func.clock_timestamp().cast(String)), 1, 16)
    return (
        update(CONT)
        .where(CONT.c.id == batch.c.id, claimable(), left)
        .values(status=ContinuationStatus.CLAIMED.value, attempts=CONT.c.attempts + 1,
                claimed_by=CONT.c.id + literal(".") + nonce, lease_expires_at=db_now("lease_s"))
        .returning(CONT.c.id, CONT.c.run_id, CONT.c.step_id, CONT.c.kind, CONT.c.name, CONT.c.attempts,
                   CONT.c.claimed_by, CONT.c.lease_expires_at)
    )  # fmt: skip


def _lease_with_context() -> Any:
    """The lease (``_lease``), each lease's holder ``:pid`` (none -> held), and the read of what each leased
    body needs (``with_context``), one statement."""
    leased = _lease().cte("claimed")
    holders = select(leased.c.claimed_by, leased.c.id, bindparam("pid", type_=String))
    held = insert(LEASES).from_select(["id", "continuation_id", "principal_id"], holders).cte("held")
    return (
        with_context(leased)
        .add_columns(leased.c.claimed_by.label("c_claimed_by"), leased.c.lease_expires_at.label("c_lease_expires_at"))
        .add_cte(held)
    )


_LEASE = DriverStatement(_lease_with_context)


@dataclass(frozen=True)
class Leased:
    """A continuation a remote worker now holds: the claim (with what its body reads), its lease id and when
    the lease ends."""

    claim: Claim
    lease_id: str
    lease_expires_at: datetime


def lease(
    conn: Connection,
    *,
    holder: str,
    steps: list[str],
    continuations: list[str],
    n: int,
    lease_s: float,
    max_attempts: int,
) -> list[Leased]:
    """ready|claimed (lease expired) -> claimed for up to ``n`` remote continuations the caller serves of runs
    on targets ``holder`` may lease (``may_lease``), each lease held by ``holder``, and what their bodies
    read, one statement in autocommit; two concurrent calls never take the same row (``SKIP LOCKED``, then
    the claim's CAS). An empty list: nothing is due for these keys that ``holder`` may lease."""
    params = {"steps": steps, "conts": continuations, "n": n, "lease_s": lease_s, "max_attempts": max_attempts,
              "pid": holder}  # fmt: skip
    rows = _LEASE.rows(conn, params)
    return [Leased(claim, row.c_claimed_by, row.c_lease_expires_at) for claim, row in claims_of(rows)]


@cache
def _trace_leases() -> Any:
    """PostgreSQL: each leased row's ``claimed_trace`` from (lease id, traceparent) pairs given as two arrays."""
    given = func.unnest(
        *(bindparam(name, type_=ARRAY(String)) for name in ("lids", "tps"))
    ).table_valued("lid", "tp").render_derived(name="given")  # fmt: skip
    return update(CONT).where(live_claim(given.c.lid)).values(claimed_trace=given.c.tp)


def trace_leases(conn: Executor, traced: dict[str, str]) -> None:
    """claimed -> claimed, each lease's ``claimed_trace`` the span it was handed out in (a Celery claim writes
    its execution's in the claim), for whatever re-drives it to link to; one statement. A row no longer held
    by that lease is left alone."""
    if traced:
        conn.execute(_trace_leases(), {"lids": list(traced), "tps": list(traced.values())})


@dataclass(frozen=True)
class LeaseState:
    """Where a lease's continuation and run stand now (what a refused heartbeat or completion reports)."""

    continuation_id: str
    status: str  # the continuation's
    held: bool  # this lease holds it under a live lease
    attempts: int
    run_id: str
    run_status: str
    step_id: str
    kind: str
    name: str

    @property
    def claimed(self) -> Claimed:
        """The continuation as a claim names it (what ``load_claim`` reads the rest from)."""
        return Claimed(self.continuation_id, self.run_id, self.step_id, self.kind, self.name, self.attempts)

    def as_dict(self) -> dict[str, Any]:
        return {"continuation_id": self.continuation_id, "continuation_status": self.status, "lease_held": self.held,
                "attempts": self.attempts, "run_id": self.run_id, "run_status": self.run_status}  # fmt: skip


def lease_state(session: Executor, lease_id: str, holder: str) -> LeaseState | None:
    """The state of the lease's continuation and run, read now; ``None`` when ``holder`` holds no lease of that
    id (``held_by``)."""
    held = live_claim(lease_id)
    row = session.execute(
        select(CONT.c.id, CONT.c.status, held.label("held"), CONT.c.attempts, RUN.c.id.label("run_id"),
               run_status(RUN).label("run_status"), CONT.c.step_id, CONT.c.kind, CONT.c.name)
        .join(RUN, RUN.c.id == CONT.c.run_id)
        .where(CONT.c.id == held_by(lease_id, holder))
    ).first()  # fmt: skip
    if row is None:
        return None
    return LeaseState(row.id, row.status, bool(row.held), row.attempts, row.run_id, row.run_status, row.step_id,
                      row.kind, row.name)  # fmt: skip


def _held_claim() -> Any:
    """The lease's continuation, whether the lease holds it, and what its body read (``with_context``)."""
    row = select(
        CONT.c.id,
        CONT.c.run_id,
        CONT.c.step_id,
        CONT.c.kind,
        CONT.c.name,
        CONT.c.attempts,
        CONT.c.status,
        live_claim(bindparam("lease_id", type_=String)).label("held"),
    ).where(CONT.c.id == held_by(bindparam("lease_id", type_=String), bindparam("pid", type_=String)))
    claimed = row.cte("claimed")
    return with_context(claimed).add_columns(claimed.c.status.label("c_status"), claimed.c.held.label("c_held"))


_HELD_CLAIM = DriverStatement(_held_claim)


def held_claim(conn: Connection, lease_id: str, holder: str) -> tuple[LeaseState, Claim] | None:
    """``lease_state`` and the claim a completion commits with (``load_claim``), read in one statement;
    ``None`` when ``holder`` holds no lease of that id."""
    rows = _HELD_CLAIM.rows(conn, {"lease_id": lease_id, "pid": holder})
    if not rows:
        return None
    [(claim, row)] = claims_of(rows)
    state = LeaseState(row.c_id, row.c_status, bool(row.c_held), row.c_attempts, row.c_run_id, row.run_status,
                       row.c_step_id, row.c_kind, row.c_name)  # fmt: skip
    return state, claim


@dataclass(frozen=True)
class Receipt:
    """What a completion committed, as the lease's caller gets it (again, on an exact retry)."""

    lease_id: str
    continuation_id: str
    run_id: str
    step_id: str
    outcome: str  # park | next | complete | fail
    outcome_digest: str
    run_status: str
    committed_at: datetime


@cache
def _record_receipt() -> Any:
    return insert(RECEIPTS)  # built once: its parameters are the receipt's fields


def record_receipt(session: Session, receipt: Receipt) -> None:
    """none -> recorded: the completion's receipt, in the transaction of its consume (the lease id is the
    key: a second completion of one lease cannot commit, its consume's CAS already lost)."""
    session.execute(_record_receipt(), receipt.__dict__)


def receipt_of(session: Executor, lease_id: str) -> Receipt | None:
    """The receipt of the lease's completion, or ``None`` when none committed."""
    row = session.execute(select(*RECEIPTS.c).where(RECEIPTS.c.lease_id == lease_id)).first()
    return None if row is None else Receipt(**row._mapping)


def outstanding_leases(session: Executor) -> tuple[int, int]:
    """Remote leases held now, and those whose lease ran out and were not taken up again yet (``/metrics``):
    a range of ``ix_continuations_remote`` each."""
    claimed = and_(CONT.c.remote, CONT.c.status == word(ContinuationStatus.CLAIMED))
    row = session.execute(
        select(
            func.count().filter(CONT.c.lease_expires_at >= db_now()),
            func.count().filter(CONT.c.lease_expires_at < db_now()),
        ).where(claimed)
    ).one()
    return int(row[0]), int(row[1])
