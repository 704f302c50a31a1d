"""Worker tasks: claim a continuation, run its body, commit its outcome once.

Tasks are thin: a continuation id in, ``execute`` does claim → body → consume, and a duplicate delivery
(consumed, dead, or held by another execution) is a no-op. The claim is a lease (``tasks.holding``).
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from models import store
from models.jsonsafe import storable_text
from models.status import RUN_TERMINAL, ContinuationKind
from models.store import Claim
from parkway.crash import crash_point
from parkway.db import database_unavailable, failure_line, single_statement
from parkway.errors import NotRegistered, WorkflowError
from parkway.logs import bind, bound, in_context
from parkway.settings import get_settings
from tasks import registry
from tasks.celery_app import RESUME_STEP, RUN_STEP, app
from tasks.holding import DATABASE_ERRORS, Abandoned, Hold, Keeper, database_fault
from tasks.outcomes import (
    Fail,
    Outcome,
    Park,
    check_outcome,
    interaction_specs,
)
from tasks.projection import project_quietly, project_soon
from tasks.publish import HANDED_ON, publish
from tasks.sdk import Context
from tasks.serving import unanswerable
from tasks.tools import RERUN, RERUN_VERSION, ParkForPermission
from tasks.tooltypes import PossiblyRan

log = logging.getLogger("parkway.worker")


@dataclass(frozen=True)
class Elsewhere:
    """A claimed continuation this worker does not run (its step or version is not registered here)."""


Result = Outcome | store.Interruption  # an Interruption: not the workflow's verdict (a Park on an unserved version)


@app.task(name=RUN_STEP, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_step(continuation_id: str) -> str:
    """Run a step body for its start continuation (exactly one commit)."""
    return _drive(continuation_id, handed_on=bool(run_step.request.get(HANDED_ON)))


@app.task(name=RESUME_STEP, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def resume_step(continuation_id: str) -> str:
    """Resume a parked step through its versioned continuation (exactly one commit)."""
    return _drive(continuation_id, handed_on=bool(resume_step.request.get(HANDED_ON)))


def _drive(continuation_id: str, *, handed_on: bool) -> str:
    """``execute``; a database that failed under it (an outage, a restart) is one warning line, not a
    traceback: nothing was committed, and the sweep publishes the continuation again once it is reachable."""
    try:
        return execute(continuation_id, handed_on=handed_on)
    except Exception as exc:
        if not database_unavailable(exc):
            raise
        log.warning("database unavailable, continuation left to the sweep: %s", failure_line(exc),
                    extra={"continuation_id": continuation_id, "action": "claim"})  # fmt: skip
        return "database unavailable"


# The worker's line for an execution that stopped without committing (tasks.holding.Abandoned).
ABANDONED = "execution abandoned, nothing committed: %s; %s"


@dataclass
class Prepared:
    """A claimed continuation with everything its body needs, read with the claim."""

    hold: Hold
    ctx: Context
    body_input: Any
    answers: dict[str, Any]


def execute(continuation_id: str, *, handed_on: bool = False) -> str:
    """Claim, run and commit one continuation; returns what happened (for logs and tests). ``handed_on``:
    a worker that does not run this version sent it here (``hand_on``).

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
    hold, ctx = prepared.hold, prepared.ctx
    crash_point("resume.after_claim")
    with Keeper(hold):
        row = hold.claim.continuation
        try:
            outcome = _people(_served(_run_body(row.kind, row.name, ctx, prepared.body_input, prepared.answers), ctx))
        except Abandoned as why:
            return _abandoned(hold, str(why), extra)
        except DATABASE_ERRORS as exc:
            return _abandoned(hold, str(database_fault(exc, "the read of who runs its version")), extra)
    crash_point("resume.before_commit")
    try:
        committed = hold.commit(outcome, reviews_started=bool(ctx.started_reviews),
                                in_commit=ctx.commit_hooks)  # fmt: skip
    except DATABASE_ERRORS as exc:  # rolled back: the outcome is decided again by the next execution
        return _abandoned(hold, str(database_fault(exc, "the outcome's commit")), extra)
    if committed is None:
        log.info("claim lost before commit; another execution owns it", extra={**extra, "action": "consume"})
        return "lost"
    to_publish = [c for c in committed.due if not c.remote]  # a remote one is leased, not published
    return _committed(_named(committed.outcome), to_publish, committed.ended, extra)


def _abandoned(hold: Hold, why: str, extra: dict[str, Any]) -> str:
    """An execution that stopped without committing (``Abandoned``): its claim, if still its own, released
    and the continuation published again at once (its attempt counted); else its lease runs out and the
    sweep re-drives it."""
    released = hold.release(why)
    then = "published again at once" if released else "if still due, the sweep re-drives it once its lease ran out"
    log.warning(ABANDONED, why, then, extra={**extra, "action": "abandon"})
    if released:
        row = hold.claim.continuation
        publish([(row.id, row.kind)], retry=False)  # once: the sweep relays a lost publish
    return "abandoned"


def _committed(outcome: str, to_publish: list[store.Due], ended: store.RunRecord | None, extra: dict[str, Any]) -> str:
    """After the consume committed (``outcome``, named as the SDK names it): publish what it made due and
    project the run it ended."""
    bind(outcome=outcome)
    log.debug("committed %s", outcome, extra={**extra, "action": "commit"})
    crash_point("resume.after_commit")
    publish(to_publish, retry=False)  # once: the sweep relays a lost publish after PARKWAY_REENQUEUE_AFTER_S
    if ended is not None:
        project_soon(ended)
    return "committed"


def _named(outcome: store.StepOutcome) -> str:
    """The committed outcome by the SDK's name for it (logs: ``outcome=Complete``)."""
    return "Interrupted" if isinstance(outcome, store.Interruption) else type(outcome).__name__


def _claim(
    continuation_id: str, execution_id: str, extra: dict[str, Any], *, handed_on: bool = False
) -> Prepared | str:
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
        prepared = _prepare(Hold(claim, execution_id, lease_s), extra)
        if isinstance(prepared, Prepared):
            return prepared
        if isinstance(prepared, Elsewhere):
            return hand_on(claim, execution_id, extra, handed_on=handed_on)
        return give_up(claim, prepared, execution_id, extra)
    return unclaimed(continuation_id, max_attempts, extra)


def give_up(claim: Claim, reason: str, execution_id: str, extra: dict[str, Any]) -> str:
    """claimed -> dead with ``reason``: a claimed continuation that can no longer be driven."""
    with single_statement() as conn:  # each give-up is one statement: a whole unit of work
        store.give_up(conn, claim.continuation.id, reason=reason, execution_id=execution_id)
    return given_up(reason, claim.run_id, extra)


def unclaimed(continuation_id: str, max_attempts: int, extra: dict[str, Any]) -> str:
    """A delivery that claimed nothing: a duplicate, or out of attempts (given up, as after a crash loop)."""
    with single_statement() as conn:
        dead = store.give_up_exhausted(conn, continuation_id, max_attempts=max_attempts)
    if dead is None:
        log.debug("duplicate delivery ignored", extra={**extra, "action": "claim"})
        return "duplicate"
    return given_up(dead.reason, dead.run_id, extra)


def _prepare(hold: Hold, extra: dict[str, Any]) -> Prepared | str | Elsewhere:
    """What the body of a claimed continuation needs, why it can no longer be driven, or that it is for
    a worker that runs its version."""
    claim = hold.claim
    extra.update(run_id=claim.run_id, step_id=claim.step.id)
    bind(run_id=claim.run_id, step_id=claim.step.id)
    reason = refusal(claim)
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
        answers=unsealed(claim.answers) if resume else {},
    )


def given_up(reason: str | None, run_id: str, extra: dict[str, Any]) -> str:
    log.warning("continuation given up: %s", reason, extra={**extra, "action": "give_up"})
    project_quietly([run_id])
    return "dead"


def unsealed(answers: dict[str, Any]) -> dict[str, Any]:
    """Sensitive fields are decrypted only here, for the continuation that consumes them."""
    for item in answers.values():
        item.unseal()
    return answers


def refusal(claim: Claim) -> str | None:
    """Why this continuation can no longer be driven, or ``None`` (checked right after the claim)."""
    if claim.run_status in RUN_TERMINAL:
        return f"run {claim.run_id} is already {claim.run_status}"
    if not claim.granted:
        return "authority revoked"
    return None


def hand_on(claim: Claim, execution_id: str, extra: dict[str, Any], *, handed_on: bool) -> str:
    """A claimed continuation whose step or version this worker does not run: nothing runs and no attempt
    is spent. The fleet decides (``store.serving``): a live worker that runs it gets it on its own queue
    (once: one handed on already is left to the sweep, so two workers never pass it back and forth); none
    within the grace, it waits for the sweep to publish it again; none for longer, it is given up."""
    row = claim.continuation
    with single_statement() as conn:
        fleet = store.serving(conn, row.kind, row.name, continuation_id=row.id)
    reason = fleet.fails_closed(get_settings().version_grace_s)
    if reason is not None:
        return give_up(claim, reason, execution_id, extra)
    with single_statement() as conn:
        remote = fleet.node is None and fleet.remote  # only remote workers serve it: theirs to lease from now on
        if not store.release_claim(conn, row.id, execution_id=execution_id, reason=None, spent=False, remote=remote):
            return "lost"
    if remote:
        log.info("%s %s is served by remote workers only: left to their leases", row.kind, row.name,
                 extra={**extra, "action": "hand_on"})  # fmt: skip
        return "handed on"
    to = None if handed_on else fleet.node
    log.info("%s %s is not run here: %s", row.kind, row.name, f"handed on to {to}" if to else "left for the sweep",
             extra={**extra, "action": "hand_on"})  # fmt: skip
    if to is not None:
        publish([(row.id, row.kind)], node=to, retry=False)
    return "handed on"


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
            result = registry.step_body(name)(ctx, body_input)
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
