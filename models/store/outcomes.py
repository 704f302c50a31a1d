"""A claimed continuation's outcome, committed with its consume: one call, the store picks the statement.

The worker (or a remote worker's completion, ``tasks.remote``) runs the body outside any transaction, then
hands the outcome here: the SDK's own types (``models.outcome``), already checked. Where no review of the step
can be running, the consume and every write of the outcome, its events included, are one statement: in
autocommit when nothing else must happen in the commit (no ``in_commit`` callback to run); in a transaction
for a park (a step that did not park rolls the consume back) or with callbacks. Otherwise one transaction
holds the consume, the review guard and the writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from models.base import utcnow
from models.checks import interaction_specs
from models.outcome import Complete, Fail, Next, Outcome, Park
from models.status import ContinuationKind, RunStatus
from models.store.claims import Claim
from models.store.continuations import consume, consume_and_finish_run, consume_and_next_step, consume_and_park
from models.store.interrupts import consume_and_interrupt_run, interrupt_run
from models.store.leases import Receipt, record_receipt
from models.store.reviews import interrupt_review, running_reviews
from models.store.runs import Due, RunRecord, erase_secrets, finish_run
from models.store.steps import next_step, park
from parkway.db import single_statement, transaction
from parkway.errors import ParkRefused


@dataclass(frozen=True)
class Interruption:
    """Not the workflow's verdict: the system cannot drive what the body asked for."""

    reason: str


# What a body returned (``models.outcome``, checked before it comes here), or the system's interruption.
StepOutcome = Outcome | Interruption


@dataclass(frozen=True)
class Completion:
    """A remote lease's completion (``models.store.leases``): its receipt is written with the consume."""

    lease_id: str
    outcome_digest: str


@dataclass(frozen=True)
class Committed:
    """What the commit did: the outcome as committed (a review guard may turn a completion into a
    failure), the continuations to publish now, the run's terminal record when it ended here, and a
    remote completion's receipt."""

    outcome: StepOutcome
    due: list[Due]
    ended: RunRecord | None
    receipt: Receipt | None = None


def commit_outcome(
    claim: Claim,
    outcome: StepOutcome,
    *,
    execution_id: str,
    reviews_started: bool = False,
    in_commit: Sequence[Callable[[Session], None]] = (),
    completion: Completion | None = None,
    raise_refused: bool = False,
) -> Committed | None:
    """claimed -> consumed with the step's outcome, committed; ``None`` when the claim was lost (another
    execution owns it now, and nothing was written). ``in_commit`` callbacks run inside the commit unless
    the run failed or was interrupted; a remote ``completion``'s receipt is written in it.

    A park that addresses what it may not (``ParkRefused``, nothing of it committed) interrupts the run with
    that reason: the system's verdict, not the workflow's. ``raise_refused``: raised instead, nothing
    committed and the claim kept (a remote worker's request, answered 403)."""
    try:
        return _commit(claim, outcome, execution_id, reviews_started, in_commit, completion)
    except ParkRefused as refused:
        if raise_refused:
            raise
        return _commit(claim, Interruption(str(refused)), execution_id, reviews_started, (), completion)


def _commit(
    claim: Claim,
    outcome: StepOutcome,
    execution_id: str,
    reviews_started: bool,
    in_commit: Sequence[Callable[[Session], None]],
    completion: Completion | None,
) -> Committed | None:
    reviews = claim.review_running or reviews_started  # otherwise no review of the step can be running
    quiet = (not in_commit or _fails(outcome)) and completion is None  # nothing else is written in the commit
    if not reviews and quiet and not isinstance(outcome, Park):  # a park that did not happen rolls back
        with single_statement() as conn:
            written = _consume_and_commit(conn, claim, outcome, execution_id)
        return None if written is None else Committed(*written)
    with transaction() as session:
        committed = _commit_in(session, claim, outcome, execution_id, reviews, in_commit)
        if committed is None or completion is None:
            return committed
        receipt = _receipt(claim, committed, completion)
        record_receipt(session, receipt)
        return Committed(committed.outcome, committed.due, committed.ended, receipt)


def _receipt(claim: Claim, committed: Committed, completion: Completion) -> Receipt:
    """The receipt of a remote completion: its outcome by the protocol's name and the run's status after it."""
    outcome, ended = committed.outcome, committed.ended
    status: str
    if isinstance(outcome, Complete | Fail):
        status = ended.status if ended is not None else _ending(outcome)
    else:
        status = RunStatus.INTERRUPTED if isinstance(outcome, Interruption) else _LIVE_AFTER[outcome.type]
    name = "interrupted" if isinstance(outcome, Interruption) else outcome.type
    return Receipt(lease_id=completion.lease_id, continuation_id=claim.continuation.id, run_id=claim.run_id,
                   step_id=claim.step.id, outcome=name, outcome_digest=completion.outcome_digest,
                   run_status=str(status), committed_at=utcnow())  # fmt: skip


def _commit_in(
    session: Session,
    claim: Claim,
    outcome: StepOutcome,
    execution_id: str,
    reviews: bool,
    in_commit: Sequence[Callable[[Session], None]],
) -> Committed | None:
    """The consume, the outcome's writes and the ``in_commit`` callbacks in the session's transaction."""
    consume_and_write = _consume_and_write if reviews else _consume_and_commit
    written = consume_and_write(session, claim, outcome, execution_id)
    if written is None:
        return None
    outcome, due, ended = written
    if not _fails(outcome):
        for fn in in_commit:
            fn(session)
    return Committed(outcome, due, ended)


_LIVE_AFTER = {"next": RunStatus.RUNNING, "park": RunStatus.WAITING}


def _ending(outcome: Complete | Fail) -> RunStatus:
    return RunStatus.COMPLETED if isinstance(outcome, Complete) else RunStatus.FAILED


def _verdict(outcome: Complete | Fail) -> dict[str, Any]:
    """How the run ends: ``completed`` with the result, or ``failed`` with the error and its details (the
    result then null)."""
    if isinstance(outcome, Complete):
        return {"status": RunStatus.COMPLETED, "result": outcome.result, "error": None, "error_details": None}
    return {"status": RunStatus.FAILED, "result": None, "error": outcome.error, "error_details": outcome.details}


def _fails(outcome: StepOutcome) -> bool:
    """The run fails or is interrupted: ``in_commit`` callbacks do not run."""
    return isinstance(outcome, Interruption | Fail)


Written = tuple[StepOutcome, list[Due], RunRecord | None]


def _consume_and_commit(
    session: Session | Connection, claim: Claim, outcome: StepOutcome, execution_id: str
) -> Written | None:
    """The consume and the outcome's writes (the step's sealed values erased with it): one statement."""
    cid, step = claim.continuation.id, claim.step
    if isinstance(outcome, Complete | Fail):
        won, ended = consume_and_finish_run(session, cid, step, execution_id=execution_id, **_verdict(outcome))
        return (outcome, [], ended) if won else None
    if isinstance(outcome, Interruption):
        won, ended = consume_and_interrupt_run(session, cid, step, reason=outcome.reason, execution_id=execution_id)
        return (outcome, [], ended) if won else None
    if isinstance(outcome, Next):
        made = consume_and_next_step(session, cid, step, execution_id=execution_id, name=outcome.step,
                                     payload=outcome.payload)  # fmt: skip
        return None if made is None else (outcome, [made], None)
    won = consume_and_park(session, cid, step, execution_id=execution_id, continuation=outcome.continuation,
                           snapshot=outcome.snapshot, interactions=interaction_specs(outcome.interactions),
                           from_continuation=claim.continuation.kind == ContinuationKind.RESUME)  # fmt: skip
    return (outcome, [], None) if won else None


def _consume_and_write(session: Session, claim: Claim, outcome: StepOutcome, execution_id: str) -> Written | None:
    """Where a review may be running: the consume, the review guard, then the outcome's writes (the guard
    reads what the consume's claim vouches for, and may turn the outcome into a failure)."""
    if consume(session, claim.continuation.id, execution_id=execution_id) is None:
        return None
    outcome = _review_guard(session, claim, outcome, execution_id)
    if not isinstance(outcome, Complete | Fail):
        # Read once, by this continuation: the sealed values go in the same transaction as the consume
        # (a run that ends here has every sealed value of the run erased by ``finish_run``).
        erase_secrets(session, step_id=claim.step.id)
    return (outcome, *_write(session, claim, outcome, execution_id))


def _write(
    session: Session, claim: Claim, outcome: StepOutcome, execution_id: str
) -> tuple[list[Due], RunRecord | None]:
    step = claim.step
    if isinstance(outcome, Interruption):
        return [], interrupt_run(session, step.run_id, reason=outcome.reason, execution_id=execution_id)
    if isinstance(outcome, Complete | Fail):
        ended = finish_run(session, step, execution_id=execution_id, **_verdict(outcome))
        return [], ended
    if isinstance(outcome, Next):
        return [next_step(session, step, name=outcome.step, payload=outcome.payload)], None
    park(session, step, continuation=outcome.continuation, snapshot=outcome.snapshot,
         interactions=interaction_specs(outcome.interactions),
         from_continuation=claim.continuation.kind == ContinuationKind.RESUME)  # fmt: skip
    return [], None


def _review_guard(session: Session, claim: Claim, outcome: StepOutcome, execution_id: str) -> StepOutcome:
    """A step cannot complete while a review it started is running: it fails with that context.

    Reviews left running by an earlier execution of this step are stranded (this execution holds the
    claim, so theirs is gone): they are interrupted here, with their counts kept.
    """
    mine = []
    for review in running_reviews(session, claim.step.id):
        if review.execution_id == execution_id:
            mine.append(review)
        else:
            interrupt_review(session, review.id)
    if mine and isinstance(outcome, Complete):
        names = ", ".join(f"{r.id} ({r.kind})" for r in mine)
        return Fail(
            f"partial failure: step {claim.step.name} returned Complete while review {names} was still running",
            details={
                "partial_failure": True,
                "running_reviews": [
                    {"id": r.id, "kind": r.kind, "finding_count": r.finding_count,
                     "verification_count": r.verification_count}
                    for r in mine
                ],
                "result": outcome.result,
            },
        )  # fmt: skip
    return outcome
