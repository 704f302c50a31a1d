"""The executor: claim → run → commit → after-commit, once for every runner (docs/operations.md, "Words").

A runner says only how a claimed continuation's body runs: a Python body in a Celery worker
(``tasks.worker``), a remote worker's completion over HTTP (``tasks.remote``), a push handler's answer
(``tasks.push``). Everything else is here, so a fix in one is a fix in all:

- **claim** (``claim``, or a lease call's batch checked by ``drivable``): ``ready`` → ``claimed`` under a
  lease, for one execution id; ``resume.after_claim`` fires once the claim is durable;
- **give up** (``give_up``): ``claimed`` → ``dead``, the run interrupted: work that can no longer be driven;
- **hand on** (``hand_on``): ``claimed`` → ``ready``, no attempt spent: nothing ran, and the work goes to
  whoever serves its key;
- **release** (``release``): ``claimed`` → ``ready``, the attempt spent: the body ran (or may have) and
  committed nothing; out of attempts, given up;
- **commit** (``commit``): ``claimed`` → ``consumed`` with the outcome, between ``resume.before_commit`` and
  ``resume.after_commit``, then the continuations it made due are published and the run it ended projected.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from sqlalchemy.orm import Session

from models import store
from models.outcome import Park
from models.status import RUN_TERMINAL
from models.store import Claim
from parkway import tracing
from parkway.crash import crash_point
from parkway.db import single_statement
from parkway.logs import bind
from parkway.settings import get_settings
from tasks.projection import project_quietly, project_soon
from tasks.publish import publish

log = logging.getLogger("parkway.executor")

Extra = dict[str, Any]  # the structured log fields of one execution (ids only)


def claim(
    continuation_id: str, execution_id: str, lease_s: float, extra: Extra, *, kind_in_name: bool = False
) -> Claim | str:
    """``ready`` (or under a lease that ran out) → ``claimed`` by ``execution_id``, with what the body reads,
    in one statement; what happened instead (``"duplicate"``, ``"dead"``) when there is nothing to run.
    ``kind_in_name``: the execution's span is named by its kind (``traced``)."""
    max_attempts = get_settings().max_attempts
    with single_statement(durable=False) as conn:  # a claim lost in a database crash is recovered as after one
        claimed = store.claim_in_one_statement(conn, continuation_id, execution_id=execution_id, lease_s=lease_s,
                                               max_attempts=max_attempts)  # fmt: skip
    if claimed is None:
        return _unclaimed(continuation_id, max_attempts, extra)
    extra.update(run_id=claimed.run_id, step_id=claimed.step.id)
    bind(run_id=claimed.run_id, step_id=claimed.step.id)
    traced(claimed, kind_in_name=kind_in_name)
    return claimed if drivable(claimed, execution_id, extra) else "dead"


def traced(claimed: Claim, *, kind_in_name: bool = False) -> None:
    """The execution's span names what it runs and links to what it follows: what made it due (a run's
    start, an answer), the execution that claimed it before (a re-drive), the parks it resumes. Its ``kind``
    only where the span's name does not say it already (``kind_in_name``: ``parkway.run_step`` is a start's,
    ``parkway.resume_step`` a resume's): each attribute costs the worker as much as a sixth of a bare span
    (bench/RESULTS.md)."""
    row = claimed.continuation
    tracing.follow(*claimed.follows)
    tracing.annotate(run_id=claimed.run_id, step_id=claimed.step.id, step=claimed.step.name,
                     kind=None if kind_in_name else row.kind,
                     continuation=row.name, attempt=row.attempts, principal=claimed.owner_name,
                     waits=",".join(claimed.answers) or None, waited_s=claimed.waited_s)  # fmt: skip


def drivable(claimed: Claim, execution_id: str, extra: Extra) -> bool:
    """Whether a continuation just claimed can be driven; one that cannot (its run ended, its owner lost
    the grant) is given up. ``resume.after_claim`` fires after either."""
    reason = refusal(claimed)
    if reason is not None:
        give_up(claimed, reason, execution_id, extra)
    crash_point("resume.after_claim")
    return reason is None


def refusal(claimed: Claim) -> str | None:
    """Why this continuation can no longer be driven, or ``None`` (checked right after the claim)."""
    if claimed.run_status in RUN_TERMINAL:
        return f"run {claimed.run_id} is already {claimed.run_status}"
    if not claimed.granted:
        return "authority revoked"
    return None


def _unclaimed(continuation_id: str, max_attempts: int, extra: Extra) -> str:
    """A delivery that claimed nothing: a duplicate, or out of attempts (given up, as after a crash loop)."""
    with single_statement() as conn:
        dead = store.give_up_exhausted(conn, continuation_id, max_attempts=max_attempts)
    if dead is None:
        log.debug("duplicate delivery ignored", extra={**extra, "action": "claim"})
        return "duplicate"
    return given_up(dead.reason, dead.run_id, extra)


def give_up(claimed: Claim, reason: str, execution_id: str, extra: Extra) -> str:
    """claimed -> dead with ``reason``, the run interrupted: a claimed continuation that can no longer be driven."""
    with single_statement() as conn:  # each give-up is one statement: a whole unit of work
        store.give_up(conn, claimed.continuation.id, reason=reason, execution_id=execution_id)
    return given_up(reason, claimed.run_id, extra)


def given_up(reason: str | None, run_id: str, extra: Extra) -> str:
    log.warning("continuation given up: %s", reason, extra={**extra, "action": "give_up"})
    project_quietly([run_id])
    return "dead"


def hand_on(claimed: Claim, execution_id: str, extra: Extra, *, resend: bool) -> str:
    """claimed -> ready, no attempt spent: this execution does not run the work (its step or version is not
    run here, or a push handler answered 410). The fleet decides (``store.serving``): none serves it past
    the grace, it is given up; only remote workers serve it, it is theirs to lease; else ``resend``: a live
    worker that runs it gets it on its own queue; without (a delivery handed on already, so two workers
    never pass it back and forth), it waits for the sweep to publish it again."""
    row = claimed.continuation
    with single_statement() as conn:
        fleet = store.serving(conn, row.kind, row.name, continuation_id=row.id)
    # A push handler not live, that has not refused the key, is offered the work whatever the grace: its
    # success makes it live again (models/store/push.py).
    reason = None if fleet.offer else fleet.fails_closed(get_settings().version_grace_s)
    if reason is not None:
        return give_up(claimed, reason, execution_id, extra)
    remote = fleet.node is None and fleet.remote  # only remote workers serve it: theirs to lease from now on
    with single_statement() as conn:
        if not store.release_claim(conn, row.id, execution_id=execution_id, reason=None, spent=False, remote=remote):
            return "lost"
    to = None if remote or not resend else fleet.node or fleet.offer
    where = "left to remote workers' leases" if remote else f"handed on to {to}" if to else "left for the sweep"
    log.info("%s %s is not run here: %s", row.kind, row.name, where, extra={**extra, "action": "hand_on"})
    if to is not None:
        publish([(row.id, row.kind)], node=to, retry=False)
    return "handed on"


def release(continuation_id: str, execution_id: str, why: str, extra: Extra) -> str:
    """claimed -> ready by the execution holding the claim, the attempt spent, noting ``why`` (what a give-up
    out of attempts reports); due again when the sweep publishes it (``PARKWAY_REENQUEUE_AFTER_S``). Out of
    attempts, given up at once. Returns ``"released"``, ``"dead"``, or ``"lost"`` when it held it no more."""
    with single_statement() as conn:
        if not store.release_claim(conn, continuation_id, execution_id=execution_id, reason=why):
            return "lost"
    with single_statement() as conn:
        dead = store.give_up_exhausted(conn, continuation_id, max_attempts=get_settings().max_attempts)
    return "released" if dead is None else given_up(dead.reason, dead.run_id, extra)


def commit(
    claimed: Claim,
    outcome: store.StepOutcome,
    execution_id: str,
    extra: Extra,
    *,
    reviews_started: bool = False,
    in_commit: Sequence[Callable[[Session], None]] = (),
    completion: store.Completion | None = None,
    raise_refused: bool = False,
) -> store.Committed | None:
    """claimed -> consumed with ``outcome`` (``store.commit_outcome``: its arguments), then after the commit
    what it made due is published (a remote one is leased, not published) and the run it ended projected.
    ``None`` when the claim was lost before the commit: another execution owns the work, nothing was written."""
    crash_point("resume.before_commit")
    with tracing.span("parkway.commit", outcome=named(outcome)), parked(outcome):
        committed = store.commit_outcome(claimed, outcome, execution_id=execution_id, reviews_started=reviews_started,
                                         in_commit=in_commit, completion=completion,
                                         raise_refused=raise_refused)  # fmt: skip
    if committed is None:
        log.info("claim lost before commit; another execution owns it", extra={**extra, "action": "commit"})
        return None
    bind(outcome=named(committed.outcome))
    tracing.annotate(outcome=named(committed.outcome))
    log.debug("committed %s", named(committed.outcome), extra={**extra, "action": "commit"})
    crash_point("resume.after_commit")
    publish([c for c in committed.due if not c.remote], retry=False)  # once: the sweep relays a lost publish
    if committed.ended is not None:
        project_soon(committed.ended)
    return committed


def parked(outcome: store.StepOutcome) -> Any:
    """A Park's span, around its commit and ended with it (no span stays open across a wait): each wait
    stores its context, for whatever resumes it to link to."""
    if not isinstance(outcome, Park):
        return nullcontext()
    keys = ",".join(i.key for i in outcome.interactions)
    return tracing.span("parkway.park", waits=keys, continuation=outcome.continuation)


def unsealed(answers: dict[str, Any]) -> dict[str, Any]:
    """Sensitive fields are decrypted only here, for the body that consumes them (any runner's)."""
    for item in answers.values():
        item.unseal()
    return answers


def named(outcome: store.StepOutcome) -> str:
    """The committed outcome by the SDK's name for it (logs: ``outcome=Complete``)."""
    return "Interrupted" if isinstance(outcome, store.Interruption) else type(outcome).__name__
