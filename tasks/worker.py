"""Worker tasks: claim a continuation, run its body, commit its outcome once.

Tasks are thin: a continuation id in, ``execute`` does claim → body → consume, and a duplicate delivery
(consumed, dead, or held by another execution) is a no-op. The claim is a lease, or for a first delivery
the row lock of the transaction that commits the outcome (``tasks.holding``).
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Literal

from celery import Task
from sqlalchemy import Connection

from models import store
from models.jsonsafe import storable_text
from models.status import RUN_TERMINAL, ContinuationKind, RunStatus
from models.store import Claim
from parkway.crash import crash_point
from parkway.crypto import join_sensitive
from parkway.db import database_unavailable, failure_line, open_transaction, single_statement
from parkway.errors import NotRegistered, WorkflowError
from parkway.logs import bind, bound, in_context
from parkway.settings import get_settings
from tasks import registry
from tasks.celery_app import RESUME_STEP, RUN_STEP, app
from tasks.holding import Abandoned, Hold, Keeper
from tasks.outcomes import (
    Complete,
    Fail,
    Next,
    Outcome,
    Park,
    check_outcome,
    interaction_specs,
)
from tasks.projection import project_quietly, project_soon
from tasks.publish import FIRST_PUBLISH, HANDED_ON, publish
from tasks.sdk import Context
from tasks.tools import RERUN, RERUN_VERSION, ParkForPermission
from tasks.tooltypes import PossiblyRan

log = logging.getLogger("parkway.worker")


@dataclass(frozen=True)
class Interrupted:
    """Not the workflow's verdict: the system cannot drive what the body asked for (a Park on a
    continuation version no live worker has advertised for the grace), so the step and run end ``interrupted``."""

    reason: str


@dataclass(frozen=True)
class Elsewhere:
    """A claimed continuation this worker does not run (its step or version is not registered here)."""


Result = Outcome | Interrupted


@app.task(name=RUN_STEP, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_step(task: Task, continuation_id: str) -> str:
    """Run a step body for its start continuation (exactly one commit)."""
    return _drive(continuation_id, _delivery(task), handed_on=bool(task.request.get(HANDED_ON)))


@app.task(name=RESUME_STEP, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def resume_step(task: Task, continuation_id: str) -> str:
    """Resume a parked step through its versioned continuation (exactly one commit)."""
    return _drive(continuation_id, _delivery(task), handed_on=bool(task.request.get(HANDED_ON)))


def _drive(continuation_id: str, delivery: Delivery, *, handed_on: bool) -> str:
    """``execute``; a database that failed under it (an outage, a restart) is one warning line, not a
    traceback: nothing was committed, and the sweep publishes the continuation again once it is reachable."""
    try:
        return execute(continuation_id, delivery=delivery, handed_on=handed_on)
    except Exception as exc:
        if not database_unavailable(exc):
            raise
        log.warning("database unavailable, continuation left to the sweep: %s", failure_line(exc),
                    extra={"continuation_id": continuation_id, "action": "claim"})  # fmt: skip
        return "database unavailable"


Delivery = Literal["first", "again", "other"]

# The worker's line for an execution that stopped without committing (tasks.holding.Abandoned).
ABANDONED = "execution abandoned, nothing committed: %s; if still due, the sweep re-drives it once its lease ran out"


def _delivery(task: Task) -> Delivery:
    """Which delivery of which message this is: the first publish's (marked by ``FIRST_PUBLISH``) for the
    first time or again (Redis and AMQP flag a redelivery), or another (the sweep's). On the filesystem
    broker, which never gives back what a dead worker took, always ``"other"``: every claim a lease."""
    if not task.request.get(FIRST_PUBLISH) or str(task.app.conf.broker_url).startswith("filesystem:"):
        return "other"
    return "again" if (task.request.delivery_info or {}).get("redelivered") else "first"


@dataclass
class Prepared:
    """A claimed continuation with everything its body needs, read with the claim."""

    hold: Hold
    ctx: Context
    body_input: Any
    answers: dict[str, Any]


def execute(continuation_id: str, *, delivery: Delivery = "other", handed_on: bool = False) -> str:
    """Claim, run and commit one continuation; returns what happened (for logs and tests).

    ``delivery`` (``_delivery``): ``"first"``, the first publish's message delivered for the first time,
    may be held by its row lock (``tasks.holding``); ``"again"``, that message delivered again, first
    counts the execution the lock may have hidden; any other claims under a lease. ``handed_on``: another
    worker that does not run this version sent it here (``_hand_on``).

    In a Celery task the ids go into the task's log context, which lasts until Celery has written its own
    line about the task: that one line (``Task … succeeded in …s: 'committed'``) then carries the run,
    step, continuation, execution and outcome, and is the execution's line at INFO (a second line of ours
    showed in the worker's profile; bench/RESULTS.md).
    """
    execution_id = store.new_id()
    locking = get_settings().locked_body_s > 0
    with nullcontext() if in_context() else bound():
        bind(continuation_id=continuation_id, execution_id=execution_id)
        extra: dict[str, Any] = {"continuation_id": continuation_id, "execution_id": execution_id}
        if locking and delivery == "first":
            with open_transaction() as conn:
                locked = _lock(conn, continuation_id, execution_id, extra)
                if locked is not None:
                    return _run(locked, extra)
        elif locking and delivery == "again":
            with single_statement() as conn:
                store.count_lost_execution(conn, continuation_id)
        prepared = _claim(continuation_id, execution_id, extra, handed_on=handed_on)
        return prepared if isinstance(prepared, str) else _run(prepared, extra)


def _run(prepared: Prepared, extra: dict[str, Any]) -> str:
    settings = get_settings()
    hold, ctx = prepared.hold, prepared.ctx
    crash_point("resume.after_claim")
    with Keeper(hold, settings.locked_body_s):
        row = hold.claim.continuation
        try:
            outcome = _run_body(row.kind, row.name, ctx, prepared.body_input, prepared.answers)
        except Abandoned as why:
            log.warning(ABANDONED, why, extra={**extra, "action": "abandon"})
            return "abandoned"
    crash_point("resume.before_commit")
    committed = hold.commit(_for_store(outcome), reviews_started=bool(ctx.started_reviews), in_commit=ctx.commit_hooks)
    if committed is None:
        log.info("claim lost before commit; another execution owns it", extra={**extra, "action": "consume"})
        return "lost"
    to_publish = [(c.id, c.kind) for c in committed.due]
    return _committed(_named(committed.outcome), to_publish, committed.ended, extra)


def _committed(
    outcome: str, to_publish: list[tuple[str, str]], ended: store.RunRecord | None, extra: dict[str, Any]
) -> str:
    """After the consume committed (``outcome``, named as the SDK names it): publish what it made due and
    project the run it ended."""
    bind(outcome=outcome)
    log.debug("committed %s", outcome, extra={**extra, "action": "commit"})
    crash_point("resume.after_commit")
    publish(to_publish, retry=False)  # once: the sweep relays a lost publish after PARKWAY_REENQUEUE_AFTER_S
    if ended is not None:
        project_soon(ended)
    return "committed"


def _for_store(outcome: Result) -> store.StepOutcome:
    """The body's outcome as the store commits it (a Park's interactions as validated specs)."""
    if isinstance(outcome, Complete):
        return store.Ending(RunStatus.COMPLETED, result=outcome.result)
    if isinstance(outcome, Fail):  # a failed run's result is null; its details have a field of their own
        return store.Ending(RunStatus.FAILED, error=outcome.error, details=outcome.details)
    if isinstance(outcome, Next):
        return store.Handover(outcome.step, outcome.payload)
    if isinstance(outcome, Park):
        return store.Parking(outcome.continuation, outcome.snapshot, interaction_specs(outcome.interactions))
    return store.Interruption(outcome.reason)


def _named(outcome: store.StepOutcome) -> str:
    """The committed outcome by the SDK's name for it (logs: ``outcome=Complete``)."""
    if isinstance(outcome, store.Ending):
        return "Complete" if outcome.status == RunStatus.COMPLETED else "Fail"
    if isinstance(outcome, store.Handover):
        return "Next"
    return "Park" if isinstance(outcome, store.Parking) else "Interrupted"


def _lock(conn: Connection, continuation_id: str, execution_id: str, extra: dict[str, Any]) -> Prepared | None:
    """A first delivery held by its row lock in ``conn``'s transaction, ready to run; ``None`` for any
    other (the lease path claims it, or gives it up with its own statements, which the lock would block)."""
    claim = store.lock_first_delivery(conn, continuation_id)
    if claim is None:
        return None
    settings = get_settings()
    hold = Hold(claim, execution_id, settings.claim_lease_s, settings.max_attempts, conn=conn)
    prepared = _prepare(hold, extra)
    if not isinstance(prepared, Prepared):
        return None
    prepared.ctx.lease_claim = hold.lease  # before the body's first journal write of its own
    return prepared


def _claim(continuation_id: str, execution_id: str, extra: dict[str, Any], *, handed_on: bool) -> Prepared | str:
    """Claim the continuation under a lease (or give up a row out of attempts or one that cannot be driven).

    A claim lost in a database crash is recovered by design (see ``transaction``): no WAL-flush wait. The
    claim and the read of what the body needs are one statement in autocommit; the rare delivery that
    claims nothing is looked at again by one more (a duplicate, or out of attempts: given up).
    """
    settings = get_settings()
    lease_s, max_attempts = settings.claim_lease_s, settings.max_attempts
    with single_statement(durable=False) as conn:
        claim = store.claim_in_one_statement(
            conn, continuation_id, execution_id=execution_id, lease_s=lease_s, max_attempts=max_attempts
        )
    if claim is not None:
        prepared = _prepare(Hold(claim, execution_id, lease_s, max_attempts), extra)
        if isinstance(prepared, Prepared):
            return prepared
        if isinstance(prepared, Elsewhere):
            return _hand_on(claim, execution_id, extra, handed_on=handed_on)
        with single_statement() as conn:  # each give-up is one statement: a whole unit of work
            store.give_up(conn, continuation_id, reason=prepared, execution_id=execution_id)
        return _given_up(prepared, claim.run_id, extra)
    with single_statement() as conn:
        dead = store.give_up_exhausted(conn, continuation_id, max_attempts=max_attempts)
    if dead is None:
        log.debug("duplicate delivery ignored", extra={**extra, "action": "claim"})
        return "duplicate"
    return _given_up(dead.reason, dead.run_id, extra)


def _prepare(hold: Hold, extra: dict[str, Any]) -> Prepared | str | Elsewhere:
    """What the body of a claimed continuation needs, why it can no longer be driven, or that it is for
    a worker that runs its version."""
    claim = hold.claim
    extra.update(run_id=claim.run_id, step_id=claim.step.id)
    bind(run_id=claim.run_id, step_id=claim.step.id)
    reason = _refusal(claim)
    if reason is not None:
        return reason
    row = claim.continuation
    if not registry.has(row.kind, row.name):
        return Elsewhere()
    resume = row.kind == ContinuationKind.RESUME
    ctx = Context(
        run_id=claim.run_id,
        step_id=claim.step.id,
        attempt=max(row.attempts, 1),
        execution_id=hold.execution_id,
        step_name=claim.step.name,
        payload=claim.step.payload,
        journal_step_id=claim.step.id,
        in_step_body=not resume,
    )
    return Prepared(
        hold=hold,
        ctx=ctx,
        body_input=claim.step.snapshot if resume else claim.step.payload,
        answers=_unsealed(claim.answers) if resume else {},
    )


def _given_up(reason: str | None, run_id: str, extra: dict[str, Any]) -> str:
    log.warning("continuation given up: %s", reason, extra={**extra, "action": "give_up"})
    project_quietly([run_id])
    return "dead"


def _unsealed(answers: dict[str, Any]) -> dict[str, Any]:
    """Sensitive fields are decrypted only here, for the continuation that consumes them."""
    for item in answers.values():
        if item.sealed is not None:
            item.value = join_sensitive(item.value, item.sealed)
            item.sealed = None
    return answers


def _refusal(claim: Claim) -> str | None:
    """Why this continuation can no longer be driven, or ``None`` (checked right after the claim)."""
    if claim.run_status in RUN_TERMINAL:
        return f"run {claim.run_id} is already {claim.run_status}"
    if not claim.granted:
        return "authority revoked"
    return None


def _hand_on(claim: Claim, execution_id: str, extra: dict[str, Any], *, handed_on: bool) -> str:
    """A claimed continuation whose step or version this worker does not run: nothing runs and no attempt
    is spent. The fleet decides (``store.serving``): a live worker that runs it gets it on its own queue
    (once: one handed on already is left to the sweep, so two workers never pass it back and forth); none
    within the grace, it waits for the sweep to publish it again; none for longer, it is given up."""
    row = claim.continuation
    with single_statement() as conn:
        fleet = store.serving(conn, row.kind, row.name, continuation_id=row.id)
    reason = fleet.fails_closed(get_settings().version_grace_s)
    if reason is not None:
        with single_statement() as conn:
            store.give_up(conn, row.id, reason=reason, execution_id=execution_id)
        return _given_up(reason, claim.run_id, extra)
    with single_statement() as conn:
        if not store.hand_back(conn, row.id, execution_id=execution_id):
            return "lost"
    to = None if handed_on else fleet.node
    log.info("%s %s is not run here: %s", row.kind, row.name, f"handed on to {to}" if to else "left for the sweep",
             extra={**extra, "action": "hand_on"})  # fmt: skip
    if to is not None:
        publish([(row.id, row.kind)], node=to, retry=False)
    return "handed on"


def _served(outcome: Outcome, ctx: Context) -> Result:
    """A Park on a version this worker does not run parks all the same while the fleet serves it, or
    advertised it within the grace (a rolling deploy); otherwise the step is interrupted, naming it."""
    if not isinstance(outcome, Park) or registry.has_continuation(outcome.continuation):
        return outcome
    with single_statement() as conn:
        fleet = store.serving(conn, ContinuationKind.RESUME, outcome.continuation)
    reason = fleet.fails_closed(get_settings().version_grace_s)
    if reason is None:
        return outcome
    log.warning("step parked on %s, which no live worker runs", outcome.continuation,
                extra={"run_id": ctx.run_id, "step_id": ctx.step_id})  # fmt: skip
    return Interrupted(f"{reason} (step {ctx.step_name} parked on it)")


def _run_body(kind: str, name: str, ctx: Context, body_input: Any, answers: dict[str, Any]) -> Result:
    """Run the body outside any transaction; an exception, or an outcome the store could not commit, is
    the workflow's ``Fail`` verdict (with text the store can hold), decided here on the first execution."""
    try:
        if kind == ContinuationKind.START:
            result = registry.step_body(name)(ctx, body_input)
        else:
            result = registry.continuation_body(name)(ctx, body_input, answers)
        return _served(check_outcome(result, f"{kind} {name}"), ctx)
    except ParkForPermission as wait:
        # The body stops before its effect; it runs again on the same journal once answered.
        snapshot = {"step": ctx.step_name, "payload": ctx.payload, "journal": ctx.journal_step_id or ctx.step_id}
        try:
            interaction_specs(wait.requests)  # refused now, not inside the commit
        except WorkflowError as exc:
            return Fail(storable_text(str(exc)))
        return Park(continuation=f"{RERUN}@{RERUN_VERSION}", snapshot=snapshot, interactions=wait.requests)
    except WorkflowError as exc:
        return Fail(storable_text(str(exc)))
    except PossiblyRan as exc:
        return Fail(storable_text(f"possibly ran: {exc}"))
    except NotRegistered as exc:
        return Fail(storable_text(str(exc)))
    except Exception as exc:
        log.warning("step body raised", exc_info=True, extra={"run_id": ctx.run_id, "step_id": ctx.step_id})
        return Fail(storable_text(f"{type(exc).__name__}: {exc}"))
