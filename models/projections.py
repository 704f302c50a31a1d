"""Which terminal runs' projections are pending: a cursor over the event log, and the failures it records.

A completion that projects fine writes no row for it (issue 42). The one row ``projection_cursor`` holds a
``position`` in the event log: every terminal run whose event batches all sort below it has its
``run_metadata.json`` written, or its failed write recorded on its row. A run is pending
(``Run.projection_pending``, derived) while it is terminal and either has a batch at or past the cursor or a
failure recorded (the column ``projection_pending``, mapped as ``Run.projection_failed``). The schedule-history
row needs no write at all: ``schedule_history`` is a view of the terminal runs (0028).

A pass (``models.projections.ended_past_cursor`` then ``advance_cursor``, run by the worker's projector at
most once per ``tasks.projection.PASS_EVERY_S`` and by the sweep) takes the batches from the cursor up to the
log's final horizon (``models.horizon``, the webhooks' rule: no transaction still open can write below it),
checks the file of every terminal run among them, writes those that disagree, records the runs whose write
failed and moves the cursor on: one row write per pass, however many runs it covers. The bound: a completion
is covered by the first pass that starts after its transaction and every older one still open when it
committed have ended: under load within a pass interval (``tasks.projection.PASS_EVERY_S``) after the projector window
(``tasks.projection._LINGER_S``) of the worker that ended it, sooner by any other worker's pass, else the
next sweep.

A recorded failure is retried in the order it is due, ``coalesce(projection_next_at, completed_at)`` (the
key of the partial index ``ix_runs_projection_pending``): each failure pushes the time out (exponential,
capped), so a run whose write keeps failing never holds back the newer ones. Times come from the database's
clock (``models.clock.db_now``).

(A simpler design, a flag set and cleared per run in batches, was the previous one: it costs a row write
per completion however the batches are made, which is what this removes.)
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, func, select, text, update
from sqlalchemy.orm import Session

from models.clock import db_now
from models.horizon import final_below
from models.store.runs import RUN_RECORD_COLUMNS, RunRecord
from models.store.sql import skip_locked
from models.tables import EventBatch, ProjectionCursor, Run

_R = cast(Table, Run.__table__)
_B = cast(Table, EventBatch.__table__)
_C = cast(Table, ProjectionCursor.__table__)

BACKOFF_BASE_S = 1.0  # after the first failure
BACKOFF_CAP_S = 300.0  # the longest a failing projection waits between attempts

# Written as the index's expression, so the planner matches ``ix_runs_projection_pending``.
# The advisory lock a cursor pass holds (its transaction's): concurrent passes never take the same runs.
PASS_LOCK = 0x7061726B70726A  # "parkprj"

due_at = func.coalesce(text("projection_next_at"), text("completed_at"))
failed = text("projection_pending")  # the index's predicate, verbatim: a failed write recorded
not_failed = _R.c.projection_pending.is_(False)


def backoff_s(attempts: int) -> float:
    """How long to wait after the ``attempts``-th failed write: 1, 2, 4 … seconds, at most the cap."""
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2.0 ** max(0, min(attempts - 1, 30)))


def _cursor() -> Any:
    return select(_C.c.position).scalar_subquery()


def _past_cursor() -> Any:
    """The ids of the runs with a batch of events at or past the cursor (a range of the log's key)."""
    return select(_B.c.run_id).where(_B.c.first_seq >= _cursor())


def pending_projections(session: Session, *, batch: int) -> list[str]:
    """Terminal runs whose failed projection write is due for another attempt, the longest due first (at
    most ``batch``; rows another projector holds are skipped). Those the cursor has not passed yet are the
    cursor pass's (``tasks.projection.catch_up``)."""
    stmt = select(Run.id).where(failed, due_at <= db_now()).order_by(due_at).limit(batch)
    return list(session.scalars(skip_locked(stmt)).all())


def pending_count(session: Session) -> int:
    """How many terminal runs' projections are pending (the recorded failures through their partial index,
    the others through the log's range past the cursor)."""
    recorded = select(func.count()).select_from(_R).where(failed).scalar_subquery()
    fresh = select(func.count()).select_from(_R).where(
        _R.c.id.in_(_past_cursor()), _R.c.completed_at.isnot(None), not_failed
    ).scalar_subquery()  # fmt: skip
    return int(session.scalar(select(recorded + fresh)) or 0)


def ended_past_cursor(
    session: Session, *, batch: int, known: Collection[str] = ()
) -> tuple[int, int, list[RunRecord]] | None:
    """A pass's reading, under the cursor's row lock: (the cursor, where it may move once these are
    projected, the records of the terminal runs without a recorded failure among the next ``batch`` batches
    of events below the final horizon, but those ``known`` already: runs whose files the caller has just
    written). ``None`` when another pass holds the cursor.

    The pass holds a transaction-level advisory lock, not the row's: a row lock would give its transaction
    an id while it writes files, and an open transaction id holds back the horizon of every reader of the
    log (webhooks, the seal, the next pass). Its transaction takes an id only at its last statement, the
    cursor's move (or at a failure it records)."""
    position = session.scalar(select(_C.c.position).where(func.pg_try_advisory_xact_lock(PASS_LOCK)))
    if position is None:
        return None
    horizon = int(session.scalar(select(final_below())) or 0)
    taken = list(
        session.execute(
            select(_B.c.first_seq, _B.c.run_id)
            .where(_B.c.first_seq >= position, _B.c.first_seq < horizon)
            .order_by(_B.c.first_seq)
            .limit(batch)
        ).all()
    )
    to = horizon if len(taken) < batch else taken[-1].first_seq + 1
    ids = sorted({row.run_id for row in taken}.difference(known))
    if not ids:
        return position, max(position, to), []
    rows = session.execute(
        select(*(_R.c[name] for name in RUN_RECORD_COLUMNS)).where(
            _R.c.id.in_(ids), _R.c.completed_at.isnot(None), not_failed
        )
    ).all()  # fmt: skip
    return position, max(position, to), [RunRecord(*row) for row in rows]


def advance_cursor(session: Session, was: int, to: int) -> bool:
    """cursor ``was`` -> ``to`` (forward only); ``False`` when it was elsewhere or would not move."""
    if to <= was:
        return False
    moved = session.execute(update(_C).where(_C.c.id == 1, _C.c.position == was).values(position=to, moved_at=db_now()))
    return getattr(moved, "rowcount", 0) == 1


def record_projection_failure(session: Session, run_id: str, attempts_seen: int) -> datetime | None:
    """A failed projection write: recorded on the run (pending until a write succeeds), attempts + 1 and the
    next attempt pushed out by ``backoff_s``, only while the run has the attempts the caller read. Returns
    the new next-attempt time, or ``None`` when it lost the race (another projector counted it)."""
    attempts = attempts_seen + 1
    next_at: datetime | None = session.execute(
        update(_R)
        .where(_R.c.id == run_id, _R.c.completed_at.isnot(None), _R.c.projection_attempts == attempts_seen)
        .values(projection_pending=True, projection_attempts=attempts, projection_next_at=db_now(backoff_s(attempts)))
        .returning(_R.c.projection_next_at)
    ).scalar_one_or_none()
    return next_at


def record_projection_failures(session: Session, records: Sequence[RunRecord]) -> int:
    """``record_projection_failure`` of runs a pass found without one: how many were recorded."""
    return sum(record_projection_failure(session, r.id, 0) is not None for r in records)
