"""One status enum per entity; each member names the transitions that reach it."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    RUNNING = "running"  # start; waiting -> running when a step's continuation becomes due (derived: models/derived.py)
    WAITING = "waiting"  # running -> waiting when a step parks
    COMPLETED = "completed"  # running -> completed (canonical terminal event)
    FAILED = "failed"  # running -> failed (the workflow's verdict)
    CANCELED = "canceled"  # waiting|running -> canceled (a person's cancel)
    INTERRUPTED = "interrupted"  # running|waiting -> interrupted (the system gave up)


RUN_TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED, RunStatus.INTERRUPTED})
RUN_LIVE = frozenset({RunStatus.RUNNING, RunStatus.WAITING})


class StepStatus(StrEnum):
    RUNNING = "running"  # created with its start continuation
    PARKED = "parked"  # running -> parked (body returned Park)
    RESUMING = "resuming"  # parked -> resuming (last interaction terminal, continuation due; derived, not stored)
    COMPLETED = "completed"  # running|resuming -> completed
    FAILED = "failed"  # running|resuming -> failed
    CANCELED = "canceled"  # parked -> canceled
    INTERRUPTED = "interrupted"  # any live -> interrupted


STEP_TERMINAL = frozenset({StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.CANCELED, StepStatus.INTERRUPTED})


class InteractionStatus(StrEnum):
    PENDING = "pending"  # created when its step parks
    ANSWERED = "answered"  # pending -> answered (first response wins)
    REJECTED = "rejected"  # pending -> rejected (permission denied)
    CANCELED = "canceled"  # pending -> canceled (cancel of the step)
    EXPIRED = "expired"  # pending -> expired (sweep, past expires_at)
    INTERRUPTED = "interrupted"  # pending -> interrupted (run given up)


INTERACTION_TERMINAL = frozenset(set(InteractionStatus) - {InteractionStatus.PENDING})


class InteractionKind(StrEnum):
    QUESTION = "question"
    PERMISSION = "permission"


class AnswererSource(StrEnum):
    ASSIGNEE = "assignee"  # named by the wait at park
    ESCALATION = "escalation"  # a level of the wait's escalation chain, answerable once reached
    DELEGATE = "delegate"  # POST /v1/interactions/{id}/delegate


class ContinuationStatus(StrEnum):
    READY = "ready"  # created due; claimed -> ready when a lease expires (sweep)
    CLAIMED = "claimed"  # ready -> claimed (a worker holds the lease)
    CONSUMED = "consumed"  # claimed -> consumed (committed with the step's outcome)
    DEAD = "dead"  # ready|claimed -> dead (given up, with a reason)


class ContinuationKind(StrEnum):
    START = "start"  # runs a step body
    RESUME = "resume"  # runs a continuation body after the step's wait


class PrincipalKind(StrEnum):
    AGENT = "agent"
    HUMAN = "human"
    ADMIN = "admin"
    WORKER = "worker"  # a remote step handler: leases, heartbeats, completes (docs/worker-protocol.md)
    AUDITOR = "auditor"  # reads the decision record of its granted targets, and nothing else (docs/operations.md)


class ReviewStatus(StrEnum):
    RUNNING = "running"  # ctx.start_review
    COMPLETED = "completed"  # running -> completed (ctx.record_review)
    FAILED = "failed"  # running -> failed (ctx.record_review with failed=True)
    INTERRUPTED = "interrupted"  # running -> interrupted (sweep: its owner is gone)


class ToolPhase(StrEnum):
    AUTHORIZING = "authorizing"  # intent recorded, waiting for a permission
    EXECUTING = "executing"  # intent durable, run() may be in progress
    SETTLED = "settled"  # outcome durable


class ToolReplay(StrEnum):
    SAFE = "safe"  # an executing call with no outcome runs again on re-execution
    NEVER = "never"  # ... is settled as possibly-run instead, never run twice


LEGACY_RUN_STATUS = {
    "success": (RunStatus.COMPLETED, None),
    "succeeded": (RunStatus.COMPLETED, None),
    "error": (RunStatus.FAILED, None),
    "stopped": (RunStatus.CANCELED, None),
    "cancelled": (RunStatus.CANCELED, None),
    "completed_with_persistence_error": (RunStatus.COMPLETED, "completed with a persistence error"),
}


def normalize_run_status(word: str) -> tuple[RunStatus, str | None]:
    """Read a stored status word, old or new, as a canonical status and an optional warning."""
    try:
        return RunStatus(word), None
    except ValueError:
        pass
    if word in LEGACY_RUN_STATUS:
        return LEGACY_RUN_STATUS[word]
    raise ValueError(f"unknown run status {word!r}")


class WebhookStatus(StrEnum):
    ACTIVE = "active"  # created; failing|disabled -> active when re-enabled (PATCH enabled=true)
    FAILING = "failing"  # active -> failing (the last retry of a delivery failed)
    DISABLED = "disabled"  # any -> disabled (PATCH enabled=false, or the receiver answered 410)
