"""A run's events as a timeline reads them: one line per event, its data kept for the expandable details.

Events never carry answer values (invariant 7), so a line is made from ids, keys, names and statuses only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models.tables import Event

BAD = frozenset({"run.failed", "run.interrupted", "step.failed", "step.interrupted", "continuation.dead"})
BAD |= {"toolcall.possibly_ran", "review.interrupted", "interaction.interrupted"}


@dataclass(frozen=True)
class Line:
    """One event on the timeline."""

    event: Event
    text: str

    @property
    def group(self) -> str:
        """The CSS class of its type: what it is about, or ``bad`` for what went wrong."""
        if self.event.type in BAD:
            return "bad"
        return self.event.type.split(".", 1)[0]


def _of(d: dict[str, Any]) -> str:
    return f" ({d['responses']} of {d['quorum']})" if d.get("quorum") else ""


def _to(d: dict[str, Any]) -> str:
    to = d.get("to")
    return ", ".join(map(str, to)) if isinstance(to, list) else str(to or "")


# A team's wait (docs/teams.md): who responded, handed it on, or was brought in.
TEAM = {
    "responded": lambda d: f"responded{_by(d, 'principal')}{_of(d)}",
    "delegated": lambda d: f"delegated{_by(d, 'by')} to {_to(d)}",
    "escalated": lambda d: f"escalated to level {d.get('level')} ({_to(d)})",
}


def _quoted(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    return f"“{value}”" if value not in (None, "") else ""


def _by(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    return f" by {value}" if value else ""


def _why(data: dict[str, Any]) -> str:
    reason = data.get("reason")
    return f": {reason}" if reason else ""


def describe(event: Event) -> str:
    """The event in a few words (the type is shown beside it)."""
    d: dict[str, Any] = event.data or {}
    kind, _, what = event.type.partition(".")
    if event.type == "run.created":
        return f"{d.get('workflow', '')} for {d.get('target', '')}{_by(d, 'owner')}"
    if kind == "run":
        return f"the run is {what}{_why(d)}"
    if event.type == "step.completed" and d.get("next"):
        return f"{d.get('name', '')} → next step {d['next']}"
    if event.type == "step.parked":
        return f"waits for its prompts, then resumes with {d.get('continuation', '')}"
    if kind == "step":
        return f"{d.get('name', '')}{_why(d)}"
    if event.type == "interaction.asked":
        return f"{d.get('kind', 'prompt')} {_quoted(d, 'key')} for {d.get('target', '')}"
    if kind == "interaction" and what in TEAM:
        return f"{_quoted(d, 'key')} {TEAM[what](d)}"
    if kind == "interaction":
        return f"{_quoted(d, 'key')} {what}{_by(d, 'answered_by')}{_by(d, 'canceled_by')}{_why(d)}"
    if kind == "toolcall":
        extra = {"intent": f", replay {d.get('replay')}, {d.get('phase')}", "settled": ""}.get(what, "")
        if what == "settled":
            extra = " ok" if d.get("ok") else " with an error"
        return f"{d.get('name', '')} ({d.get('key', '')}){extra}"
    if kind == "continuation":
        return f"{d.get('name', '')}{_why(d)}"
    if kind == "review" and "finding_count" in d:
        return f"verdict {_quoted(d, 'verdict')}, {d['finding_count']} findings, {d.get('verification_count')} verified"
    if kind == "review":
        return f"{d.get('kind', '')}{_why(d)}".strip() or str(d.get("review_id", ""))
    return ", ".join(f"{k}={v}" for k, v in sorted(d.items()) if isinstance(v, str | int | bool))[:200]


def lines(events: list[Event]) -> list[Line]:
    return [Line(event, describe(event)) for event in events]
