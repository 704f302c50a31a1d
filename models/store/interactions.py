"""Interactions: who may act on one, its authoritative state, and cancel."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Row, String, bindparam, case, cast, exists, select, update
from sqlalchemy.orm import Session

from models.base import utcnow
from models.clock import db_now
from models.status import RUN_TERMINAL, InteractionStatus, RunStatus, StepStatus
from models.store.driver import DriverStatement
from models.store.events import event_select, insert_events
from models.store.principals import ANSWERERS, Actor
from models.store.runs import FINISH_STEP, finish_run_update, history_of
from models.store.sql import GRANT, INTER, RUN, STEP, Executor, bp, canonical_json, word
from models.tables import Interaction, Principal, Run
from parkway.errors import Conflict, Forbidden, Gone, NotFound, WrongKind


def interaction_state(session: Executor, interaction: Interaction | Row[Any]) -> dict[str, Any]:
    """The authoritative state of an interaction as errors carry it (no values: they may be sensitive)."""
    run_status = session.scalar(select(Run.status).where(Run.id == interaction.run_id))
    answered_by = None
    if interaction.answered_by_id:
        answered_by = session.scalar(select(Principal.name).where(Principal.id == interaction.answered_by_id))
    return {
        "id": interaction.id,
        "run_id": interaction.run_id,
        "step_id": interaction.step_id,
        "key": interaction.key,
        "kind": interaction.kind,
        "status": interaction.status,
        "run_status": run_status,
        "answered_by": answered_by,
        "answered_at": interaction.answered_at.isoformat() if interaction.answered_at else None,
        "expires_at": interaction.expires_at.isoformat() if interaction.expires_at else None,
    }


_LOCK_STEP_OF = (
    select(STEP.c.id)
    .where(STEP.c.id == select(INTER.c.step_id).where(INTER.c.id == bindparam("iid")).scalar_subquery())
    .with_for_update()
)


def interaction_read(principal_id: Any, columns: Sequence[Any] = (INTER,)) -> Any:
    """The interaction ``:iid`` (``columns`` of it), its run's status and whether ``principal_id`` holds a
    live grant on its target: one read."""
    return (
        select(
            *columns,
            RUN.c.status.label("run_status"),
            exists()
            .where(GRANT.c.principal_id == principal_id, GRANT.c.target == INTER.c.target, GRANT.c.revoked_at.is_(None))
            .label("granted"),
        )
        .join(RUN, RUN.c.id == INTER.c.run_id)
        .where(INTER.c.id == bindparam("iid"))
    )


# Cancels (and the reads again after a lost CAS) also read whether the principal owns the run and holds a
# live grant on the run's target: an agent may cancel only the interactions of its own runs.
INTERACTION = interaction_read(bindparam("pid")).add_columns(
    RUN.c.owner_id.label("run_owner_id"),
    exists()
    .where(GRANT.c.principal_id == bindparam("pid"), GRANT.c.target == RUN.c.target, GRANT.c.revoked_at.is_(None))
    .label("owner_granted"),
)


def read_interaction(
    session: Executor, statement: Any, interaction_id_: str, principal: Actor, act: Act
) -> tuple[Row[Any], str]:
    """``statement`` (``INTERACTION`` or the answer's locking read) for this interaction and principal;
    ``NotFound`` for an unknown id, then as ``authorize`` for ``act``."""
    params = {"iid": interaction_id_, "pid": principal.id}
    if isinstance(statement, DriverStatement):
        interaction = statement.first(session, params)
    else:
        interaction = session.execute(statement, params).first()
    if interaction is None:
        raise NotFound(f"interaction {interaction_id_} does not exist")
    authorize(interaction, principal, act)
    return interaction, interaction.run_status


Act = Literal["answer", "cancel"]


def authorize(interaction: Row[Any], principal: Actor, act: Act) -> None:
    """Who may answer or cancel an interaction, the one rule for every path (HTTP, the page,
    the SDK): a human or an admin with a live grant on the interaction's target (admins read everything,
    but answer and cancel only where granted); agents never answer (``WrongKind``) and cancel only the
    interactions of runs they own while holding a live grant on the run's target. ``Forbidden``
    otherwise. A disabled principal holds no live grant (disabling revokes them), so it may do neither.
    ``interaction`` is a row of ``INTERACTION`` (``granted``; for a cancel ``run_owner_id`` and
    ``owner_granted`` too)."""
    if principal.kind not in ANSWERERS:
        if act == "answer":
            raise WrongKind(
                f"principal {principal.name} is of kind {principal.kind}; this needs {' or '.join(ANSWERERS)}",
                name=principal.name,
                kind=principal.kind,
                kinds=ANSWERERS,
            )
        if interaction.run_owner_id != principal.id or not interaction.owner_granted:
            raise Forbidden(
                f"agent {principal.name} may cancel only the interactions of its own runs, while granted on "
                "their target"
            )
        return
    if not interaction.granted:
        raise Forbidden(f"principal {principal.name} holds no grant on target {interaction.target}")


def lock_interaction(session: Executor, interaction_id_: str, principal: Actor, act: Act) -> tuple[Row[Any], str]:
    """Lock the interaction's step, then read the interaction, its run's status and the principal's grant.

    Answers, cancels and expiry of one step are serialized by that lock, so "was this the last pending
    one?" has one true answer. Raises ``NotFound`` for an unknown id, then as ``authorize`` for ``act``
    (before anything about its state is told).
    """
    if session.execute(_LOCK_STEP_OF, {"iid": interaction_id_}).first() is None:
        raise NotFound(f"interaction {interaction_id_} does not exist")
    return read_interaction(session, INTERACTION, interaction_id_, principal, act)


def refuse_ended_wait(session: Executor, interaction: Row[Any], run_status: str) -> None:
    """Raise ``Gone`` for a pending interaction whose wait has ended: past its deadline by the database's
    clock (the sweep will record the expiry; the outcome never depends on when it runs, nor on this host's
    clock) or its run already terminal."""
    if interaction.expires_at is not None and interaction.expires_at <= session.scalar(select(db_now())):
        state = interaction_state(session, interaction)
        state["status"] = InteractionStatus.EXPIRED.value
        raise Gone(f"interaction {interaction.id} expired at {interaction.expires_at.isoformat()}", state)
    if run_status in RUN_TERMINAL:
        raise Gone(
            f"run {interaction.run_id} of interaction {interaction.id} is {run_status}",
            interaction_state(session, interaction),
        )


def cancel_digest(reason: str | None) -> str:
    """What tells an exact retry of a cancel from another cancel with the same ``response_id``."""
    return hashlib.sha256(canonical_json({"reason": reason}).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class CancelReceipt:
    response_id: str
    canceled_at: datetime
    status: str = "canceled"

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "response_id": self.response_id, "canceled_at": self.canceled_at}


_WHY = cast(bindparam("why"), String)
_PENDING = INTER.c.status == word(InteractionStatus.PENDING)


def _cancel() -> Any:
    """The cancel's writes as one statement, under the step's lock: every pending interaction of the step
    ``:sid`` -> canceled (``:iid`` carrying the response), then the step and the run ``:rid`` -> canceled
    with the run's history row and its sealed values erased, and the events in that order."""
    target = INTER.c.id == bindparam("iid")
    closed = (
        update(INTER)
        .where(INTER.c.step_id == bindparam("sid"), _PENDING)
        .values(
            status=InteractionStatus.CANCELED.value,
            closed_at=bp("at", INTER.c.closed_at),
            reason=_WHY,
            response_id=case((target, bindparam("rsp")), else_=INTER.c.response_id),
            response_digest=case((target, bindparam("digest")), else_=INTER.c.response_digest),
            closed_by_id=case((target, bindparam("by")), else_=INTER.c.closed_by_id),
        )
        .returning(INTER.c.id, INTER.c.key)
        .cte("closed")
    )
    won = exists(select(closed.c.id))
    step = FINISH_STEP.where(won).returning(STEP.c.id, STEP.c.name).cte("step_ended")
    ended = finish_run_update(bindparam("rid")).where(won).cte("run_ended")
    # The closed interactions were pending and hold no sealed value: the two updates never share a row.
    erased = (
        update(INTER)
        .where(
            INTER.c.run_id == bindparam("rid"),
            INTER.c.secret.is_not(None),
            INTER.c.status != word(InteractionStatus.PENDING),
            won,
        )
        .values(secret=None)
        .cte("erased")
    )
    run_id, sid = cast(bindparam("rid"), String), cast(bindparam("sid"), String)
    events = insert_events(
        event_select(
            0,
            "interaction.canceled",
            run_id,
            closed,
            interaction_id=closed.c.id,
            step_id=sid,
            key=closed.c.key,
            canceled_by=cast(bindparam("byname"), String),
        ),
        event_select(1, "step.canceled", run_id, step, step_id=step.c.id, name=step.c.name),
        event_select(
            2, "run.canceled", run_id, ended, status=ended.c.status, execution_id=ended.c.finished_by, reason=_WHY
        ),
    )
    return select(closed.c.id).add_cte(step, ended, history_of(ended), erased, events)


_CANCEL = _cancel()


def cancel(
    session: Session, interaction_id_: str, *, response_id: str, principal: Actor, reason: str | None
) -> CancelReceipt:
    """pending -> canceled for the whole parked step: its pending interactions, the step and the run (one
    statement, ``_CANCEL``, after the read that locks the step).

    An exact retry (same ``response_id`` and ``reason``) returns the first receipt; the same
    ``response_id`` with another reason is a ``Conflict``, as for answers (the digest of the reason is
    kept in the interaction's ``response_digest``; a cancel recorded before it was kept has none, and any
    retry of it matches). Raises ``Conflict`` when the interaction was answered, ``Gone`` when its wait
    already ended, and as ``authorize`` for who may cancel.
    """
    interaction, run_status = lock_interaction(session, interaction_id_, principal, "cancel")
    status = interaction.status
    digest = cancel_digest(reason)
    if status == InteractionStatus.CANCELED and interaction.response_id == response_id:
        if interaction.response_digest not in (None, digest):
            raise Conflict(
                f"interaction {interaction.id} was canceled by response {response_id} with another reason",
                interaction_state(session, interaction),
            )
        assert interaction.closed_at is not None
        return CancelReceipt(response_id, interaction.closed_at)
    if status in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED):
        raise Conflict(
            f"interaction {interaction.id} was already {status}; it cannot be canceled",
            interaction_state(session, interaction),
        )
    if status != InteractionStatus.PENDING:
        raise Gone(f"interaction {interaction.id} is {status}", interaction_state(session, interaction))
    refuse_ended_wait(session, interaction, run_status)
    now = utcnow()
    why = reason or f"canceled by {principal.name}"
    params = {"iid": interaction.id, "sid": interaction.step_id, "rid": interaction.run_id, "rsp": response_id,
              "digest": digest, "by": principal.id, "byname": principal.name, "why": why, "at": now,
              "eid": f"cancel:{response_id}"}  # fmt: skip
    terminal = {"step_to": StepStatus.CANCELED.value, "to": RunStatus.CANCELED.value, "res": None, "err": None,
                "det": None}  # fmt: skip
    session.execute(_CANCEL, {**params, **terminal})
    return CancelReceipt(response_id, now)
