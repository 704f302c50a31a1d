"""What a tool call's permission asks and how a tool call fails, for the SDK (``tasks.sdk`` re-exports
them, their public home) and the journal (``tasks.tools``), so the journal never imports the SDK back."""

from __future__ import annotations

from models.outcome import Permission
from parkway.errors import ParkwayError

__all__ = ["Permission", "PermissionRejected", "PossiblyRan", "ToolFailed"]


class PossiblyRan(ParkwayError):
    """Raised in a step body when a ``never`` tool call may have run before a crash (it is not rerun)."""


class ToolFailed(ParkwayError):
    """Raised in a step body when a journaled tool call settled with an error (replayed, not rerun)."""


class PermissionRejected(ToolFailed):
    """Raised in a step body when the permission a tool call asked for was rejected (or ended unanswered)."""
