"""The store's tool-call journal: intent, authorization and outcome of each side effect in a step.

Same rules as ``models.store``: compare-and-set in the caller's transaction, ``None`` when a race
was lost, never a commit.
"""

from __future__ import annotations

import hashlib
from functools import cache
from typing import Any, cast

from sqlalchemy import Boolean, Table, bindparam, exists, select, update
from sqlalchemy.orm import Session

from models.base import utcnow
from models.status import ToolPhase, ToolReplay
from models.store import canonical_json
from models.store.events import event_params, event_row, event_select, events_if, insert_events
from models.store.sql import bp, insert_or_winner, insert_unless_taken, made_or_found
from models.tables import ToolCall


def tool_call_id(journal_step_id: str, key: str) -> str:
    return hashlib.sha256(canonical_json(["tool", journal_step_id, key]).encode()).hexdigest()[:32]


def args_digest(args: Any) -> str:
    """Arguments are journaled only as a digest: they may hold secrets, and identity is all we need."""
    return hashlib.sha256(canonical_json(args).encode()).hexdigest()


_TOOL = cast(Table, ToolCall.__table__)


@cache
def _record_intent() -> Any:
    """The tool call ``:id`` unless a row for its key exists, and its event only if it was made."""
    columns = ("id", "run_id", "step_id", "key", "name", "args_digest", "replay", "phase", "interaction_id",
               "journaled_by")  # fmt: skip
    at = bp("at", _TOOL.c.created_at)
    made = (
        insert_unless_taken(_TOOL, "id")
        .values({**{name: bp(name, _TOOL.c[name]) for name in columns}, "possibly_ran": False, "runs": 0,
                 "created_at": at, "updated_at": at})
        .returning(*_TOOL.c)
        .cte("made")
    )  # fmt: skip
    found = select(*_TOOL.c).where(_TOOL.c.id == bindparam("id"))
    return made_or_found(made, found).add_cte(events_if(exists(select(made.c.id))).cte("events"))


def record_intent(
    session: Session,
    *,
    run_id: str,
    journal_step_id: str,
    key: str,
    name: str,
    digest: str,
    replay: str,
    phase: ToolPhase,
    interaction_id: str | None,
    journaled_by: str | None = None,
) -> tuple[ToolCall, bool]:
    """-> authorizing|executing: the intent, durable before anything runs, in one statement, journaled by the
    remote lease ``journaled_by`` (``None``: a Python body). Returns (row, created); an existing row for the
    same key is returned as it is (the caller compares name and digest)."""
    call_id = tool_call_id(journal_step_id, key)
    intent = event_row(run_id, "toolcall.intent", key=key, name=name, replay=replay, phase=phase.value)
    params = {"id": call_id, "run_id": run_id, "step_id": journal_step_id, "key": key, "name": name,
              "args_digest": digest, "replay": replay, "phase": phase.value, "interaction_id": interaction_id,
              "journaled_by": journaled_by, "at": utcnow(), **event_params([intent])}  # fmt: skip
    return insert_or_winner(session, ToolCall, _record_intent(), params, lambda: session.get(ToolCall, call_id))


def reauthorize(session: Session, call_id: str, *, interaction_id: str) -> ToolCall | None:
    """authorizing -> authorizing for a new permission request (the resource set changed)."""
    return _transition(session, call_id, ToolPhase.AUTHORIZING, ToolPhase.AUTHORIZING, interaction_id=interaction_id)


def _moved(to: ToolPhase, event: str, *, settles: bool = False, **data: Any) -> Any:
    """The tool call ``:call_id`` ``:from_phase`` -> ``to`` (a settle's ``:outcome``, ``:error`` and
    ``:possibly_ran`` with it), and ``event`` (its key, name and ``data``) only if it moved; as ORM rows."""
    values = {"phase": to.value, "updated_at": bp("at", _TOOL.c.updated_at)}
    if settles:
        values |= {name: bp(name, _TOOL.c[name]) for name in ("outcome", "error", "possibly_ran")}
    moved = (
        update(_TOOL)
        .where(_TOOL.c.id == bindparam("call_id"), _TOOL.c.phase == bindparam("from_phase"))
        .values(**values)
        .returning(*_TOOL.c)
        .cte("moved")
    )
    row = event_select(0, event, moved.c.run_id, moved, key=moved.c.key, name=moved.c.name, replay=moved.c.replay,
                       phase=moved.c.phase, **data)  # fmt: skip
    statement = select(*moved.c).add_cte(insert_events(row))
    # The row this session may hold already is refreshed with what the update returned.
    return select(ToolCall).from_statement(statement).execution_options(populate_existing=True)


@cache
def _authorize() -> Any:
    return _moved(ToolPhase.EXECUTING, "toolcall.authorized")


@cache
def _settle() -> Any:
    return _moved(ToolPhase.SETTLED, "toolcall.settled", settles=True, ok=bindparam("ok", type_=Boolean))


@cache
def _settle_possibly_ran() -> Any:
    return _moved(ToolPhase.SETTLED, "toolcall.possibly_ran", settles=True)


def authorize(session: Session, call_id: str) -> ToolCall | None:
    """authorizing -> executing, once its permission was approved, with its event: one statement; durable
    before the body runs. ``None`` when it is not authorizing any more."""
    params = {"call_id": call_id, "from_phase": ToolPhase.AUTHORIZING.value, "at": utcnow()}
    return session.scalars(_authorize(), params).first()


def mark_running(session: Session, call_id: str, *, journaled_by: str | None = None) -> ToolCall | None:
    """executing -> executing with one more recorded start of ``run`` (a safe replay), by the remote lease
    ``journaled_by`` (``None``: a Python body): from now on the only one whose outcome it takes."""
    return session.scalar(
        update(ToolCall)
        .where(ToolCall.id == call_id, ToolCall.phase == ToolPhase.EXECUTING)
        .values(runs=ToolCall.runs + 1, updated_at=utcnow(), journaled_by=journaled_by)
        .returning(ToolCall)
        .execution_options(synchronize_session=False)
    )


POSSIBLY_RAN = "possibly ran before a crash; not run again"


def start_executing(
    session: Session, call_id: str, *, created: bool, replay: str, journaled_by: str | None = None
) -> bool:
    """An executing call about to run: ``True`` (run it) with one more recorded start (``mark_running``); or,
    for a ``never`` call an earlier execution left executing with no outcome (not ``created`` now),
    executing -> settled as possibly-run, never run again: ``False``. The one rule for Python bodies
    (``tasks.tools``) and remote workers (``tasks.remote``, ``journaled_by`` their lease)."""
    if not created and replay == ToolReplay.NEVER:
        settle(session, call_id, from_=ToolPhase.EXECUTING, error=POSSIBLY_RAN, possibly_ran=True)
        return False
    mark_running(session, call_id, journaled_by=journaled_by)
    return True


def settle(
    session: Session,
    call_id: str,
    *,
    from_: ToolPhase,
    outcome: Any = None,
    error: str | None = None,
    possibly_ran: bool = False,
) -> ToolCall | None:
    """executing|authorizing -> settled with its outcome (or error) and its event, one statement; ``None``
    if it settled already."""
    params = {"call_id": call_id, "from_phase": from_.value, "at": utcnow(), "outcome": outcome, "error": error,
              "possibly_ran": possibly_ran, "ok": error is None}  # fmt: skip
    return session.scalars(_settle_possibly_ran() if possibly_ran else _settle(), params).first()


def _transition(session: Session, call_id: str, from_: ToolPhase, to: ToolPhase, **values: Any) -> ToolCall | None:
    return session.scalar(
        update(ToolCall)
        .where(ToolCall.id == call_id, ToolCall.phase == from_)
        .values(phase=to.value, updated_at=utcnow(), **values)
        .returning(ToolCall)
        .execution_options(synchronize_session=False)
    )


def calls_of_run(session: Session, run_id: str) -> list[ToolCall]:
    return list(session.scalars(select(ToolCall).where(ToolCall.run_id == run_id).order_by(ToolCall.created_at)))
