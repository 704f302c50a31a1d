"""The Celery runner: a continuation's Python body, run in this worker (``tasks.executor`` does the rest).

Tasks are thin: a continuation id in, ``execute`` has the executor claim it, runs the body under the claim
(its lease kept by ``tasks.holding``), and has the executor commit the outcome once; a duplicate delivery
(consumed, dead, or claimed by another execution) is a no-op, and work this worker does not run is handed on.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from models import store
from models.jsonsafe import storable_text
from models.status import ContinuationKind
from parkway import tracing
from parkway.db import database_unavailable, failure_line, single_statement
from parkway.errors import NotRegistered, WorkflowError
from parkway.logs import bind, bound, in_context
from parkway.settings import get_settings
from tasks import executor, registry
from tasks.celery_app import RESUME_STEP, RUN_STEP, app
from tasks.holding import DATABASE_ERRORS, Hold, Keeper, Stopped, database_fault, fault_line
from tasks.outcomes import (
    Fail,
    Outcome,
    Park,
    check_outcome,
    interaction_specs,
)
from tasks.publish import HANDED_ON, TRACEPARENT, publish
from tasks.sdk import Context
from tasks.serving import unanswerable
from tasks.tools import RERUN, RERUN_VERSION, ParkForPermission
from tasks.tooltypes import PossiblyRan

log = logging.getLogger("parkway.worker")


Result = Outcome | store.Interruption  # an Interruption: not the workflow's verdict (a Park on an unserved version)


@app.task(name=RUN_STEP, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_step(continuation_id: str) -> str:
    """Run a step body for its start continuation (exactly one commit)."""
    return _drive(RUN_STEP, continuation_id, run_step.request)


@app.task(name=RESUME_STEP, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def resume_step(continuation_id: str) -> str:
    """Resume a parked step through its versioned continuation (exactly one commit)."""
    return _drive(RESUME_STEP, continuation_id, resume_step.request)


def _drive(task: str, continuation_id: str, request: Any) -> str:
    """``execute`` in the delivery's span (a new trace: what it follows is linked once the claim reads it;
    ``PARKWAY_TRACE_WAITS=parent``: the child of the span that published it); a database that failed under
    it (an outage, a restart) is one warning line, not a traceback: nothing was committed, and the sweep
    publishes the continuation again once it is reachable."""
    with tracing.span(task, kind="consumer", root=True, follows=tracing.publisher(request.get(TRACEPARENT)),
                      continuation_id=continuation_id):  # fmt: skip
        return _executed(continuation_id, handed_on=bool(request.get(HANDED_ON)))


def _executed(continuation_id: str, *, handed_on: bool) -> str:
    try:
        return execute(continuation_id, handed_on=handed_on)
    except Exception as exc:
        if not database_unavailable(exc):
            raise
        log.warning("database unavailable, continuation left to the sweep: %s", failure_line(exc),
                    extra={"continuation_id": continuation_id, "action": "claim"})  # fmt: skip
        return "database unavailable"


# The worker's line for an execution that stopped without committing (tasks.holding.Stopped).
RELEASED = "execution stopped, nothing committed: %s; %s"
THEN = {"released": "released and published again at once", "dead": "out of attempts, given up",
        "lost": "if still due, the sweep re-drives it once its lease ran out"}  # fmt: skip


@dataclass
class Prepared:
    """A claimed continuation with everything its body needs, read with the claim."""

    hold: Hold
    ctx: Context
    body_input: Any
    answers: dict[str, Any]


def execute(continuation_id: str, *, handed_on: bool = False) -> str:
    """Claim, run and commit one continuation (``tasks.executor``); returns what happened (for logs and
    tests). ``handed_on``: a worker that does not run this version sent it here (``executor.hand_on``).

    In a Celery task the ids go into the task's log context, which lasts until Celery has written its own
    line about the task: that one line (``Task … succeeded in …s: 'committed'``) then carries the run,
    step, continuation, execution and outcome, and is the execution's line at INFO (a second line of ours
    showed in the worker's profile; bench/RESULTS.md).
    """
    execution_id = store.new_id()
    with nullcontext() if in_context() else bound():
        bind(continuation_id=continuation_id, execution_id=execution_id)
        extra: dict[str, Any] = {"continuation_id": continuation_id, "execution_id": execution_id}
        prepared = _claim(continuation_id, execution_id, extra, handed_on=handed_on)
        return prepared if isinstance(prepared, str) else _run(prepared, extra)


def _run(prepared: Prepared, extra: dict[str, Any]) -> str:
    """The body run under its kept claim, then the executor's commit."""
    hold, ctx = prepared.hold, prepared.ctx
    with Keeper(hold):
        row = hold.claim.continuation
        try:
            outcome = _people(_served(_run_body(row.kind, row.name, ctx, prepared.body_input, prepared.answers), ctx))
        except Stopped as why:
            return _release(hold, str(why), extra)
        except DATABASE_ERRORS as exc:
            return _release(hold, str(database_fault(exc, "the read of who runs its version")), extra)
    try:
        committed = executor.commit(hold.claim, outcome, hold.execution_id, extra,
                                    reviews_started=bool(ctx.started_reviews), in_commit=ctx.commit_hooks)  # fmt: skip
    except DATABASE_ERRORS as exc:  # rolled back: the outcome is decided again by the next execution
        return _release(hold, str(database_fault(exc, "the outcome's commit")), extra)
    return "lost" if committed is None else "committed"


def _release(hold: Hold, why: str, extra: dict[str, Any]) -> str:
    """An execution that stopped without committing (``Stopped``): its claim, if still its own, released
    (``executor.release``) and the continuation published again at once; else its lease runs out and the
    sweep re-drives it."""
    row = hold.claim.continuation
    try:
        released = executor.release(row.id, hold.execution_id, why, extra)
    except DATABASE_ERRORS as exc:
        log.info("claim not released (%s); its lease runs out", fault_line(exc), extra=extra)
        released = "lost"
    then = THEN[released]
    log.warning(RELEASED, why, then, extra={**extra, "action": "release"})
    if released == "released":
        publish([(row.id, row.kind)], retry=False)  # once: the sweep relays a lost publish
    return "released"


def _claim(
    continuation_id: str, execution_id: str, extra: dict[str, Any], *, handed_on: bool = False
) -> Prepared | str:
    """The executor's claim under a lease kept by this process (``tasks.holding``); a continuation this
    worker does not run is handed on (``executor.hand_on``)."""
    lease_s = get_settings().claim_lease_s
    claimed = executor.claim(continuation_id, execution_id, lease_s, extra, kind_in_name=True)  # run_step/resume_step
    if isinstance(claimed, str):
        return claimed
    row = claimed.continuation
    if not registry.has(row.kind, row.name):
        return executor.hand_on(claimed, execution_id, extra, resend=not handed_on)
    return _prepare(Hold(claimed, execution_id, lease_s))


def _prepare(hold: Hold) -> Prepared:
    """What the body of a claimed continuation needs."""
    claim, row = hold.claim, hold.claim.continuation
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
        answers=executor.unsealed(claim.answers) if resume else {},
    )


def _people(outcome: Result) -> Result:
    """A Park whose waits no one could answer (a quorum larger than who could ever answer:
    ``serving.unanswerable``) fails with a sentence naming it."""
    problem = unanswerable(outcome) if isinstance(outcome, Park) else None
    return outcome if problem is None else Fail(storable_text(problem))


def _served(outcome: Result, ctx: Context) -> Result:
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
    return store.Interruption(f"{reason} (step {ctx.step_name} parked on it)")


def _run_body(kind: str, name: str, ctx: Context, body_input: Any, answers: dict[str, Any]) -> Result:
    """Run the body outside any transaction; an exception, or an outcome the store could not commit, is
    the workflow's ``Fail`` verdict (with text the store can hold), decided here on the first execution."""
    try:
        if kind == ContinuationKind.START:
            result = registry.step_body(name)(ctx, registry.checked_payload(name, body_input))
        else:
            result = registry.continuation_body(name)(ctx, body_input, answers)
        return check_outcome(result, f"{kind} {name}")
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
