"""The sweep's time-driven transitions of a pending wait's team (docs/teams.md): its reminders and its
escalation levels, each due by the database's clock, counted from the park.

Each is one statement for a batch: the due rows of its partial index, oldest first, locked skipping those
another sweep holds; the compare-and-set on the timer moves it to the next delay (NULL after the last), so a
reminder or a level is written once however many sweeps run; the events in the same statement.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import Integer, String, bindparam, cast, func, select, update
from sqlalchemy.dialects.postgresql import INTERVAL
from sqlalchemy.orm import Session

from models.base import utcnow
from models.clock import db_now
from models.status import InteractionStatus
from models.store.events import event_select, insert_events
from models.store.sql import INTER, skip_locked, word

_PENDING = INTER.c.status == word(InteractionStatus.PENDING)


def _after_park(*path: Any) -> Any:
    """The park time plus the seconds at ``path`` in the wait's ``team`` (NULL past the last delay)."""
    seconds = func.json_extract_path_text(INTER.c.team, *path)
    return INTER.c.created_at + cast(seconds.concat(" seconds"), INTERVAL)


def _advance(timer: Any, counter: Any, event: str, **data: Any) -> Any:
    """Up to ``:n`` pending waits whose ``timer`` is due -> ``counter`` + 1, ``timer`` at the next delay of
    ``team``'s list (``data`` names it), with one ``event`` each."""
    due = (_PENDING, timer.is_not(None), timer <= db_now())
    batch = skip_locked(select(INTER.c.id).where(*due).order_by(timer).limit(bindparam("n", type_=Integer))).cte(
        "batch"
    )
    number = cast(counter + 1, String)  # the next delay's index in the list (0-based), as text for the path
    moved = (
        update(INTER)
        .where(INTER.c.id == batch.c.id, *due)
        .values({counter: counter + 1, timer: data.pop("next")(number)})
        .returning(
            *(INTER.c[c] for c in ("id", "run_id", "step_id", "key", "kind", "target")),
            counter.label("n"),
            INTER.c.team,
        )
        .cte("moved")
    )
    fields = {name: build(moved) for name, build in data.items()}
    events = insert_events(
        event_select(0, event, cast(moved.c.run_id, String), moved, interaction_id=moved.c.id,
                     step_id=moved.c.step_id, key=moved.c.key, kind=moved.c.kind, target=moved.c.target,
                     **fields)
    )  # fmt: skip
    return select(moved.c.id).add_cte(events)


@cache
def _remind() -> Any:
    return _advance(
        INTER.c.remind_at,
        INTER.c.reminders,
        "interaction.reminded",
        next=lambda number: _after_park("remind_after", number),
        reminder=lambda moved: moved.c.n,
    )


@cache
def _escalate() -> Any:
    return _advance(
        INTER.c.escalate_at,
        INTER.c.level,
        "interaction.escalated",
        next=lambda number: _after_park("escalate", number, "after"),
        level=lambda moved: moved.c.n,
        to=lambda moved: func.json_extract_path(moved.c.team, "escalate", cast(moved.c.n - 1, String), "to"),
    )


def remind_due(session: Session, *, batch: int) -> list[str]:
    """pending -> pending, one reminder further (``interaction.reminded``), for up to ``batch`` waits whose
    next reminder is due by the database's clock; their ids (none: nothing due)."""
    return list(session.execute(_remind(), {"n": batch, "at": utcnow()}).scalars())


def escalate_due(session: Session, *, batch: int) -> list[str]:
    """pending -> pending at the next escalation level (``interaction.escalated``: that level's answerers may
    answer from now on), for up to ``batch`` waits whose next level is due; their ids (none: nothing due)."""
    return list(session.execute(_escalate(), {"n": batch, "at": utcnow()}).scalars())
