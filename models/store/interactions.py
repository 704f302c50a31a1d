"""Interactions: who may act on one, its authoritative state, the reads that lock its step, and cancel."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, Literal

from sqlalchemy import Row, String, bindparam, case, cast, exists, func, literal, select, true, update

from models.base import utcnow
from models.clock import db_now
from models.derived import run_status
from models.jsonsafe import canonical_json
from models.status import RUN_TERMINAL, InteractionStatus, RunStatus, StepStatus
from models.store.driver import DriverStatement
from models.store.events import CLOSED_COLUMNS, closed_event, ended_event, event_select, insert_events
from models.store.principals import (
    ANSWERERS,
    Actor,
    PrincipalRef,
    TokenHolder,
    live_grant,
    live_holding,
    live_named,
    unknown_principal,
)
from models.store.runs import finish_run_update, finish_step_statement, finished_by
from models.store.sql import ANSWERER, INTER, PRIN, RUN, STEP, Executor, bp, word, words
from parkway import tracing
from parkway.errors import Conflict, Forbidden, Gone, NotFound, Unauthenticated, WrongKind


def interaction_state(interaction: Row[Any]) -> dict[str, Any]:
    """The authoritative state of an interaction as errors carry it (no values: they may be sensitive), from
    a row of ``interaction_read`` (its run's status and who answered it are columns of that read)."""
    return {
        "id": interaction.id,
        "run_id": interaction.run_id,
        "step_id": interaction.step_id,
        "key": interaction.key,
        "kind": interaction.kind,
        "status": interaction.status,
        "run_status": interaction.run_status,
        "answered_by": interaction.answered_by,
        "answered_at": interaction.answered_at.isoformat() if interaction.answered_at else None,
        "expires_at": interaction.expires_at.isoformat() if interaction.expires_at else None,
    }


def stands(move: Any) -> Any:
    """A delegation (``move``, an alias of the answerer rows) still stands: its place has not moved on since.
    Each place is held by the delegate of its latest move (the same test ``parkway_held_by_delegation`` makes)."""
    later = ANSWERER.alias()
    return ~exists().where(later.c.interaction_id == move.c.interaction_id, later.c.place_id == move.c.place_id,
                           later.c.id > move.c.id).correlate_except(later)  # fmt: skip


def held_by_delegation(principal_id: Any) -> Any:
    """The place ``principal_id`` holds on the interaction (of the enclosing read) by delegation: the first of
    the places moved to it whose move still ``stands``; NULL for none (``parkway_held_by_delegation``,
    migration 0027, the part of ``place_of`` a delegation decides)."""
    return func.parkway_held_by_delegation(INTER.c.id, principal_id)


def place_of(principal_id: Any, *, every_level: bool = False) -> Any:
    """Who holds which place, the one rule (docs/teams.md), as the function ``parkway_place_of`` (migration
    0027) that the answer's own function calls too: the id of the place in which ``principal_id`` acts on the
    interaction (of the enclosing read) as a person, NULL when it holds none. A place delegated to it first
    (the first of the places moved to it whose move still ``stands``), else its own: a live grant on the
    target (unless its assignees alone may answer), or a row naming it or a target it holds a live grant on
    (an assignee, an escalation level reached; ``every_level``: any level), not delegated away. A delegation
    moves a place, never adds one: the delegator holds it no more, and a quorum counts places."""
    return func.parkway_place_of(INTER.c.id, principal_id, literal(every_level))


def may_answer(principal_id: Any, *, every_level: bool = False) -> Any:
    """Whether ``principal_id`` may act on the interaction (of the enclosing read) as a person: it holds a
    place (``place_of``)."""
    return place_of(principal_id, every_level=every_level).is_not(None)


def interaction_read(principal_id: Any, columns: Sequence[Any] = (INTER,)) -> Any:
    """The interaction ``:iid`` (``columns`` of it), its run's status, whether its deadline has passed by the
    database's clock, who answered it, and the place in which ``principal_id`` may act on it as a person
    (``place_of``; NULL: none): one read."""
    return (
        select(
            *columns,
            run_status(RUN).label("run_status"),
            (INTER.c.expires_at <= db_now()).label("expired"),
            select(PRIN.c.name).where(PRIN.c.id == INTER.c.answered_by_id).scalar_subquery().label("answered_by"),
            place_of(principal_id).label("place"),
        )
        .join(RUN, RUN.c.id == INTER.c.run_id)
        .where(INTER.c.id == bindparam("iid"))
    )


def locking(read: Any) -> Any:
    """``read`` (of ``interaction_read``) taking the lock of the interaction's step. Answers, cancels and
    expiry of one step are serialized by that lock, so "was this the last pending one?" has one true answer.
    Its rows come from the statement's snapshot, taken before any wait for that lock: the write that follows
    is a compare-and-set that may still lose, and the interaction is then read again (``INTERACTION``)."""
    return read.join(STEP, STEP.c.id == INTER.c.step_id).with_for_update(of=STEP)


# The caller given by name (an in-process answer or cancel) or by its token's hash (an answer over HTTP): the
# live principal so found, joined into the interaction's read, so that finding it costs no statement of its own.
CALLER = PRIN.alias("caller")


class InteractionRead:
    """One read of ``interaction_read`` (``read(principal_id)`` builds it) as three statements: for a principal
    given as an ``Actor`` (``:pid``), by name (``:pname``) and by token hash (``:th``). The last two are the
    live principal so found (its ``caller_*`` columns) with the read lateral to it: one row when that
    principal is live (the interaction's columns NULL for an unknown ``:iid``), none otherwise."""

    def __init__(self, read: Callable[[Any], Any]) -> None:
        self.by_id = DriverStatement(lambda: read(bindparam("pid")))
        self.by_name = DriverStatement(lambda: _by_caller(read).where(live_named(CALLER)))
        self.by_token = DriverStatement(lambda: _by_caller(read).where(live_holding(CALLER)))


def _by_caller(read: Callable[[Any], Any]) -> Any:
    """``read`` lateral to the principal ``CALLER`` (its ``caller_*`` columns), which a ``where`` then finds."""
    found = read(CALLER.c.id).lateral("interaction")
    caller = [CALLER.c[name].label(f"caller_{name}") for name in ("id", "name", "kind", "token_hash")]
    return select(*caller, *found.c).select_from(CALLER.outerjoin(found, true()))


def _cancel_read(principal_id: Any) -> Any:
    """Cancels (and the reads again after a lost CAS) also read whether the principal owns the run and holds
    a live grant on the run's target: an agent may cancel only the interactions of its own runs."""
    return interaction_read(principal_id).add_columns(
        RUN.c.owner_id.label("run_owner_id"),
        live_grant(principal_id, RUN.c.target).label("owner_granted"),
    )


INTERACTION = InteractionRead(_cancel_read)


def read_interaction(
    session: Executor, read: InteractionRead, interaction_id_: str, principal: Caller, act: Act
) -> tuple[Row[Any], Actor]:
    """``read`` for this interaction and principal (an ``Actor``; a name, ``Forbidden`` first when no live
    principal has it; a ``TokenHolder``, as ``_caller_row``), and the principal; then ``NotFound`` for an
    unknown id, then as ``authorize``."""
    if isinstance(principal, str | TokenHolder):
        row = _caller_row(session, read, interaction_id_, principal)
        principal = PrincipalRef(row.caller_id, row.caller_name, row.caller_kind)
        interaction = None if row.id is None else row
    else:
        interaction = read.by_id.first(session, {"iid": interaction_id_, "pid": principal.id})
    if interaction is None:
        raise NotFound(f"interaction {interaction_id_} does not exist")
    authorize(interaction, principal, act)
    return interaction, principal


def _caller_row(session: Executor, read: InteractionRead, interaction_id_: str, caller: str | TokenHolder) -> Any:
    """The row of ``read`` for the live principal of this name or holding this token (``refuse_caller``)."""
    if isinstance(caller, str):
        row = read.by_name.first(session, {"iid": interaction_id_, "pname": caller})
    else:
        row = read.by_token.first(session, {"iid": interaction_id_, "th": caller.token_hash})
    refuse_caller(row, caller)
    return row


def refuse_caller(row: Any, caller: Caller) -> Actor:
    """The principal a read found for ``caller`` (its ``caller_*`` columns; none found: ``row`` None or its
    ``caller_id`` NULL), refused before anything of the interaction: by name (or an ``Actor`` looked up by
    its name), ``Forbidden`` when no live principal has it; a ``TokenHolder``, ``Unauthenticated`` when none
    holds the token, ``WrongKind`` when it is not of the holder's kinds."""
    found = row is not None and row.caller_id is not None
    if not isinstance(caller, TokenHolder):
        if not found:
            raise unknown_principal(caller if isinstance(caller, str) else caller.name)
        return caller if not isinstance(caller, str) else PrincipalRef(row.caller_id, row.caller_name, row.caller_kind)
    if not found or not hmac.compare_digest(row.caller_token_hash, caller.token_hash):
        raise Unauthenticated("no live principal holds this token")
    tracing.annotate(principal=row.caller_name)
    principal = PrincipalRef(row.caller_id, row.caller_name, row.caller_kind)
    if row.caller_kind not in caller.kinds:
        raise _wrong_kind(principal, caller.kinds)
    return principal


Act = Literal["answer", "cancel"]
Caller = Actor | str | TokenHolder  # a principal read already, or one the read finds (by name, by token)


def authorize(interaction: Row[Any], principal: Actor, act: Act) -> None:
    """Who may answer or cancel an interaction, the one rule for every path (HTTP, the page, the SDK): a
    human or an admin who holds a place on it (``place_of``: a live grant on the interaction's target, named
    by it, or delegated to; admins read everything, but answer and cancel only so); agents never answer
    (``WrongKind``) and cancel only the interactions of runs they own while holding a live grant on the run's
    target. ``Forbidden`` otherwise. A disabled principal holds no live grant (disabling revokes them), so
    it may do neither. ``interaction`` is a row of ``INTERACTION`` (``place``; for a cancel
    ``run_owner_id`` and ``owner_granted`` too)."""
    if principal.kind not in ANSWERERS:
        if act == "answer":
            raise _wrong_kind(principal, ANSWERERS)
        if interaction.run_owner_id != principal.id or not interaction.owner_granted:
            raise Forbidden(
                f"agent {principal.name} may cancel only the interactions of its own runs, while granted on "
                "their target"
            )
        return
    if interaction.place is None:
        raise Forbidden(f"principal {principal.name} holds no place on interaction {interaction.id}: no grant on"
                        f" target {interaction.target}, not named by it, or delegated away")  # fmt: skip


def _wrong_kind(principal: Actor, kinds: tuple[str, ...]) -> WrongKind:
    detail = f"principal {principal.name} is of kind {principal.kind}; this needs {' or '.join(kinds)}"
    return WrongKind(detail, name=principal.name, kind=principal.kind, kinds=kinds)


def refuse_ended_wait(interaction: Row[Any]) -> None:
    """Raise ``Gone`` for a pending interaction (a row of ``interaction_read``) whose wait has ended: past its
    deadline by the database's clock (the sweep will record the expiry; the outcome never depends on when it
    runs, nor on this host's clock) or its run already terminal."""
    if interaction.expired:
        state = interaction_state(interaction)
        state["status"] = InteractionStatus.EXPIRED.value
        raise Gone(f"interaction {interaction.id} expired at {interaction.expires_at.isoformat()}", state)
    if interaction.run_status in RUN_TERMINAL:
        raise Gone(
            f"run {interaction.run_id} of interaction {interaction.id} is {interaction.run_status}",
            interaction_state(interaction),
        )


_PENDING = INTER.c.status == word(InteractionStatus.PENDING)


def run_not_ended(run_id: Any) -> Any:
    """The run ``run_id`` (an expression) is not terminal, in the statement's snapshot."""
    return exists().where(RUN.c.id == run_id, ~RUN.c.status.in_(words(sorted(s.value for s in RUN_TERMINAL))))


def cancel_digest(reason: str | None) -> str:
    """What tells an exact retry of a cancel from another cancel with the same ``response_id``."""
    return hashlib.sha256(canonical_json({"reason": reason}).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class CancelReceipt:
    response_id: str
    canceled_at: datetime
    run_id: str  # the run the cancel ended (not part of the receipt a caller is shown)
    status: str = "canceled"

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "response_id": self.response_id, "canceled_at": self.canceled_at}


_WHY = cast(bindparam("why"), String)
_INTERACTION_LOCKED = InteractionRead(lambda principal_id: locking(_cancel_read(principal_id)))
_TARGET = INTER.alias("target")


@cache
def _cancel() -> Any:
    """The cancel's writes as one statement, under the step's lock: while ``:iid`` is still pending and its
    run ``:rid`` live (the lock may have been waited for since the read), every pending interaction of the
    step ``:sid`` -> canceled (``:iid`` carrying the response), then the step and the run -> canceled with
    its sealed values erased, and the events in that order. No row (nothing
    written) when the target is not pending any more or its run has ended."""
    target = INTER.c.id == bindparam("iid")
    still_open = exists().where(_TARGET.c.id == bindparam("iid"), _TARGET.c.status == word(InteractionStatus.PENDING))
    closed = (
        update(INTER)
        .where(INTER.c.step_id == bindparam("sid"), _PENDING, still_open, run_not_ended(bindparam("rid")))
        .values(
            status=InteractionStatus.CANCELED.value,
            closed_at=bp("at", INTER.c.closed_at),
            secret=None,  # a quorum wait's responses so far may hold sealed values
            reason=_WHY,
            response_id=case((target, bindparam("rsp")), else_=INTER.c.response_id),
            response_digest=case((target, bindparam("digest")), else_=INTER.c.response_digest),
            closed_by_id=case((target, bindparam("by")), else_=INTER.c.closed_by_id),
        )
        .returning(*(INTER.c[name] for name in CLOSED_COLUMNS), INTER.c.reason)
        .cte("closed")
    )
    won = exists(select(closed.c.id))
    step = finish_step_statement().where(won).returning(STEP.c.id, STEP.c.name).cte("step_ended")
    ended = finish_run_update(bindparam("rid")).where(won).cte("run_ended")
    # The closed interactions were pending and are erased as they close: the two updates never share a row.
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
    run_id, by = cast(bindparam("rid"), String), cast(bindparam("byname"), String)
    events = insert_events(
        closed_event(0, "interaction.canceled", run_id, closed, canceled_by=by, reason=closed.c.reason),
        event_select(1, "step.canceled", run_id, step, step_id=step.c.id, name=step.c.name),
        ended_event(2, "run.canceled", run_id, ended, reason=_WHY),
    )
    return select(closed.c.id).add_cte(step, ended, erased, events)


def cancel(
    session: Executor, interaction_id_: str, *, response_id: str, principal: Actor | str, reason: str | None
) -> CancelReceipt:
    """pending -> canceled for the whole parked step: its pending interactions, the step and the run.

    An exact retry (same ``response_id`` and ``reason``) returns the first receipt; the same
    ``response_id`` with another reason is a ``Conflict``, as for answers (the digest of the reason is
    kept in the interaction's ``response_digest``; a cancel recorded before it was kept has none, and any
    retry of it matches). Raises ``Conflict`` when the interaction was answered, ``Gone`` when its wait
    already ended, and as ``authorize`` for who may cancel.

    Two statements: the read that takes the step's lock, then the CAS with all it implies and the events
    (``_cancel()``); when the CAS lost (something committed while the lock was waited for), a read again says
    what won.
    """
    digest = cancel_digest(reason)
    interaction, principal = read_interaction(session, _INTERACTION_LOCKED, interaction_id_, principal, "cancel")
    settled = _settled_cancel(interaction, response_id, digest, principal)
    if settled is not None:
        return settled
    now = utcnow()
    why = reason or f"canceled by {principal.name}"
    params = {"iid": interaction.id, "sid": interaction.step_id, "rid": interaction.run_id, "rsp": response_id,
              "digest": digest, "by": principal.id, "byname": principal.name, "why": why, "at": now,
              **finished_by(f"cancel:{response_id}")}  # fmt: skip
    terminal = {"step_to": StepStatus.CANCELED.value, "to": RunStatus.CANCELED.value, "res": None, "err": None,
                "det": None}  # fmt: skip
    if session.execute(_cancel(), {**params, **terminal}).first() is None:
        interaction, _ = read_interaction(session, INTERACTION, interaction_id_, principal, "cancel")
        settled = _settled_cancel(interaction, response_id, digest, principal)
        if settled is not None:
            return settled
        raise Conflict(f"interaction {interaction.id} was closed concurrently")  # pragma: no cover
    return CancelReceipt(response_id, now, interaction.run_id)


def _settled_cancel(interaction: Row[Any], response_id: str, digest: str, principal: Actor) -> CancelReceipt | None:
    """``None`` while the interaction can still be canceled; the first receipt for an exact retry (the same
    principal's same ``response_id`` and reason); otherwise raises ``Conflict`` (it was answered, or canceled
    by this response with another reason) or ``Gone`` (canceled by another response, or ended otherwise)."""
    status = interaction.status
    if (
        status == InteractionStatus.CANCELED
        and interaction.response_id == response_id
        and interaction.closed_by_id == principal.id
    ):
        if interaction.response_digest not in (None, digest):
            raise Conflict(
                f"interaction {interaction.id} was canceled by response {response_id} with another reason",
                interaction_state(interaction),
            )
        assert interaction.closed_at is not None
        return CancelReceipt(response_id, interaction.closed_at, interaction.run_id)
    if status in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED):
        raise Conflict(
            f"interaction {interaction.id} was already {status}; it cannot be canceled",
            interaction_state(interaction),
        )
    if status != InteractionStatus.PENDING:
        raise Gone(f"interaction {interaction.id} is {status}", interaction_state(interaction))
    refuse_ended_wait(interaction)
    return None
