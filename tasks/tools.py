"""``ctx.tool``: side effects through a durable journal, so a re-executed body never repeats one that
must not repeat, with permission preflight that waits durably before the effect.

Phases: authorizing (a permission is asked) → executing (intent durable, ``run`` may be called) →
settled (outcome durable). On re-execution a settled call returns its outcome; an executing call with no
outcome is re-run if ``safe``, and settled as possibly-run (never run again) if ``never``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from models import journal, store
from models.status import InteractionStatus, ToolPhase, ToolReplay
from models.tables import Interaction
from parkway import tracing
from parkway.crash import crash_point
from parkway.errors import WorkflowError
from tasks import registry
from tasks.holding import own_write
from tasks.tooltypes import Permission, PermissionRejected, PossiblyRan, ToolFailed

if TYPE_CHECKING:
    from tasks.sdk import Context

RERUN = "parkway.rerun"
RERUN_VERSION = 1
REPLAY_CLASSES = tuple(ToolReplay)


class ParkForPermission(BaseException):  # control flow: `except Exception` in a body must not eat it)
    """Raised by ``ctx.tool`` when the call must wait for permissions: the worker parks the step."""

    def __init__(self, requests: list[Permission]) -> None:
        super().__init__(f"waiting for {len(requests)} permission(s)")
        self.requests = requests


def request_id(journal_step_id: str, key: str, permission: Permission) -> str:
    """Deterministic for (call, action, resource set): a different target asks afresh."""
    material = store.canonical_json(
        ["toolperm", journal_step_id, key, permission.action, sorted(set(map(str, permission.resources)))]
    )
    return hashlib.sha256(material.encode()).hexdigest()[:32]


def run_tool(
    ctx: Context,
    name: str,
    *,
    key: str,
    args: Any,
    replay: str,
    run: Callable[[], Any],
    permissions: Sequence[Permission] = (),
) -> Any:
    """Journal, authorize and run one side effect; returns what ``run`` returned (now or before a crash).
    In its span: the tool, its key and replay class, and whether it ran now, was replayed, or possibly ran."""
    with tracing.span("parkway.tool", tool=name, key=key, replay=replay):
        return _journaled(ctx, name, key, args, replay, run, permissions)


def _journaled(ctx: Context, name: str, key: str, args: Any, replay: str, run: Callable[[], Any],
               permissions: Sequence[Permission]) -> Any:  # fmt: skip
    if replay not in REPLAY_CLASSES:
        raise WorkflowError(f"tool call {key}: replay must be 'safe' or 'never', not {replay!r}")
    if not key or key in ctx.tool_keys:
        raise WorkflowError(f"tool call key {key!r} is empty or used twice in one step")
    if permissions and not ctx.in_step_body:
        raise WorkflowError(f"tool call {key}: permission preflight is for step bodies; park with a Permission first")
    ctx.tool_keys.add(key)
    try:
        digest = journal.args_digest(json.loads(json.dumps(args, allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise WorkflowError(f"tool call {key}: args are not JSON-serializable: {exc}") from None
    requests = [_with_id(ctx, key, p) for p in permissions]
    wanted = ",".join(p.request_id or "" for p in requests) or None
    with own_write(ctx) as session:
        row, created = journal.record_intent(
            session,
            run_id=ctx.run_id,
            journal_step_id=ctx.journal_step_id or ctx.step_id,
            key=key,
            name=name,
            digest=digest,
            replay=replay,
            phase=ToolPhase.AUTHORIZING if requests else ToolPhase.EXECUTING,
            interaction_id=wanted,
        )
        if (row.name, row.args_digest) != (name, digest):
            raise WorkflowError(f"tool call {key} was journaled as {row.name} with other arguments; it is not run")
        call_id, phase = row.id, ToolPhase(row.phase)
        # Signals are raised only after this transaction commits what they depend on.
        signal: BaseException | None = None
        settled: tuple[Any, str | None, bool] | None = None
        if phase == ToolPhase.SETTLED:
            settled = (row.outcome, row.error, row.possibly_ran)
        elif phase == ToolPhase.AUTHORIZING:
            verdict = _permission_verdict(session, row.interaction_id, wanted)
            if verdict == "ask":
                if row.interaction_id != wanted:
                    journal.reauthorize(session, call_id, interaction_id=wanted or "")
                signal = ParkForPermission(requests)
            elif verdict != "approved":
                journal.settle(session, call_id, from_=ToolPhase.AUTHORIZING, error=f"permission {verdict}")
                signal = PermissionRejected(f"tool call {key}: permission {verdict}; it did not run")
            else:
                journal.authorize(session, call_id)
                journal.mark_running(session, call_id)
        elif not journal.start_executing(session, call_id, created=created, replay=replay):
            # An earlier execution recorded the intent and died before the outcome: it may have run.
            signal = PossiblyRan(f"tool call {key} ({name}) may have run before a crash; it is not run again")
    tracing.annotate(phase=str(phase), replayed=settled is not None,
                     possibly_ran=isinstance(signal, PossiblyRan) or bool(settled and settled[2]))  # fmt: skip
    if settled is not None:
        return _replay(*settled, key=key)
    if signal is not None:
        raise signal
    crash_point("tool.after_intent")
    try:
        value = run()
    except Exception as exc:
        _settle(ctx, call_id, error=f"{type(exc).__name__}: {exc}")
        raise
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        _settle(ctx, call_id, error=f"result is not JSON-serializable: {exc}")
        raise WorkflowError(f"tool call {key}: its result is not JSON-serializable: {exc}") from None
    crash_point("tool.after_run")
    _settle(ctx, call_id, outcome=value)
    return value


def _with_id(ctx: Context, key: str, permission: Permission) -> Permission:
    return Permission(
        key=f"tool:{key}:{permission.action}",
        action=permission.action,
        resources=sorted(set(map(str, permission.resources))),
        target=permission.target,
        expires_in=permission.expires_in,
        request_id=request_id(ctx.journal_step_id or ctx.step_id, key, permission),
    )


def _permission_verdict(session: Any, recorded: str | None, wanted: str | None) -> str:
    """'approved', 'ask' (not asked yet, still pending, or another resource set), or why it is refused."""
    if recorded != wanted or not wanted:
        return "ask"
    statuses = []
    for interaction_id in wanted.split(","):
        row = session.get(Interaction, interaction_id)
        if row is None or row.status == InteractionStatus.PENDING:
            return "ask"
        approved = row.status == InteractionStatus.ANSWERED and (row.value or {}).get("approved") is True
        statuses.append("approved" if approved else row.status)
    refused = [s for s in statuses if s != "approved"]
    return refused[0] if refused else "approved"


def _replay(outcome: Any, error: str | None, possibly_ran: bool, *, key: str) -> Any:
    if possibly_ran:
        raise PossiblyRan(f"tool call {key} may have run before a crash; it is not run again")
    if error is not None:
        if error.startswith("permission "):
            raise PermissionRejected(f"tool call {key}: {error}; it did not run")
        raise ToolFailed(f"tool call {key} failed: {error}")
    return outcome


def _settle(ctx: Context, call_id: str, *, outcome: Any = None, error: str | None = None) -> None:
    # Not fenced: what ran is recorded even by an execution that lost its claim meanwhile (unless a
    # re-drive settled the call first), so a replay returns it rather than "possibly ran".
    with own_write(ctx, fenced=False) as session:
        journal.settle(session, call_id, from_=ToolPhase.EXECUTING, outcome=outcome, error=error)


def rerun(ctx: Context, snapshot: dict[str, Any], answers: dict[str, Any]) -> Any:
    """After a tool call's permissions were answered, run the step body again on its own journal."""
    ctx.step_name, ctx.payload, ctx.journal_step_id = snapshot["step"], snapshot["payload"], snapshot["journal"]
    ctx.in_step_body = True
    return registry.step_body(snapshot["step"])(ctx, registry.checked_payload(snapshot["step"], snapshot["payload"]))


registry.register_continuation(RERUN, RERUN_VERSION, rerun)  # as @continuation would; tasks.sdk imports this module
