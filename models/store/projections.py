"""The terminal projections' flag and schedule-history row."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import String, bindparam, func, select, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from models.base import utcnow
from models.status import normalize_run_status
from models.store.runs import RunRecord
from models.store.sql import HIST, RUN, bp, skip_locked
from models.tables import Run, ScheduleHistory


def lock_run_for_projection(session: Session, run_id: str) -> Run | None:
    """The run, locked for its projector; ``None`` when unknown or another projector holds it."""
    run: Run | None = session.scalar(skip_locked(select(Run).where(Run.id == run_id)))
    return run


def _upsert_history() -> Any:
    given = pg_insert(HIST).values({name: bp(name, HIST.c[name]) for name in (c.key for c in HIST.c)})
    renewed = {name: given.excluded[name] for name in ("status", "completed_at", "execution_id")}
    return given.on_conflict_do_update(index_elements=[HIST.c.run_id], set_=renewed).returning(ScheduleHistory)


# The row this session may hold already is refreshed with what the upsert returned.
@cache
def _upsert_history_orm() -> Any:
    return select(ScheduleHistory).from_statement(_upsert_history()).execution_options(populate_existing=True)


def record_schedule_history(session: Session, run: Run) -> ScheduleHistory:
    """none (or stale) -> the run's schedule-history row as its canonical terminal record (never ``None``),
    in one statement (a stale row keeps its workflow and ``recorded_at``)."""
    assert run.completed_at is not None and run.finished_by is not None
    status, _ = normalize_run_status(run.status)
    params = {"run_id": run.id, "workflow": run.workflow, "status": status.value, "completed_at": run.completed_at,
              "execution_id": run.finished_by, "recorded_at": utcnow()}  # fmt: skip
    row: ScheduleHistory = session.scalars(_upsert_history_orm(), params).one()
    return row


@cache
def _clear_projection() -> Any:
    return (
        update(RUN)
        .where(
            RUN.c.id == bindparam("rid"),
            RUN.c.projection_pending.is_(True),
            RUN.c.status == bindparam("was"),
            RUN.c.finished_by == bindparam("by"),
        )
        .values(
            projection_pending=False, projection_attempts=0, projection_next_at=None
        )  # a success clears the back-off
    )


def clear_projection_pending(session: Session, run: RunRecord | Run) -> bool:
    """projection_pending -> done, only while the run's terminal record is what was projected; ``False``
    when it changed or was cleared already."""
    result = session.execute(_clear_projection(), {"rid": run.id, "was": run.status, "by": run.finished_by})
    return getattr(result, "rowcount", 0) == 1


@cache
def _clear_projections() -> Any:
    """PostgreSQL: ``_clear_projection()`` for many runs as one statement, its (id, status, finished_by)
    triples given as three arrays."""
    given = func.unnest(
        *(bindparam(name, type_=ARRAY(String)) for name in ("rids", "was", "by"))
    ).table_valued("rid", "was", "by").render_derived(name="given")  # fmt: skip
    return (
        update(RUN)
        .where(
            RUN.c.id == given.c.rid,
            RUN.c.projection_pending.is_(True),
            RUN.c.status == given.c.was,
            RUN.c.finished_by == given.c.by,
        )
        .values(projection_pending=False, projection_attempts=0, projection_next_at=None)
    )


def clear_projections_pending(session: Session, runs: Sequence[RunRecord | Run]) -> int:
    """``clear_projection_pending`` for several runs: how many were cleared. On PostgreSQL one statement
    (an executemany, even pipelined, costs a Bind and an Execute per run; bench/RESULTS.md has the figure)."""
    if len(runs) == 1:
        return int(clear_projection_pending(session, runs[0]))
    arrays = {"rids": [r.id for r in runs], "was": [r.status for r in runs], "by": [r.finished_by for r in runs]}
    result = session.execute(_clear_projections(), arrays)
    return int(getattr(result, "rowcount", 0) or 0)
