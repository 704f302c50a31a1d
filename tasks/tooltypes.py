"""What a tool call's permission asks and how a tool call fails, for the SDK (``tasks.sdk`` re-exports
them, their public home) and the journal (``tasks.tools``), so the journal never imports the SDK back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from parkway.errors import ParkwayError


@dataclass(frozen=True)
class Permission:
    key: str
    action: str
    resources: Sequence[str]
    target: str
    expires_in: float | None = None
    request_id: str | None = None  # set by ctx.tool's preflight: deterministic for (call, action, resources)
    # Teams (docs/teams.md): responses needed, who may answer, reminders, escalation; "unreachable": rejected
    # only once `quorum` approvals can no longer come (else at the first rejection).
    quorum: int = 1
    assignees: Sequence[str] = ()
    assignees_only: bool = False
    remind_after: Sequence[float] = ()
    escalate: Sequence[tuple[float, str | Sequence[str]]] = ()
    reject: str = "first"


class PossiblyRan(ParkwayError):
    """Raised in a step body when a ``never`` tool call may have run before a crash (it is not rerun)."""


class ToolFailed(ParkwayError):
    """Raised in a step body when a journaled tool call settled with an error (replayed, not rerun)."""


class PermissionRejected(ToolFailed):
    """Raised in a step body when the permission a tool call asked for was rejected (or ended unanswered)."""
