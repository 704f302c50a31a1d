"""Checks of a wait's team options (docs/teams.md) before anything commits: each raises ``WorkflowError``
with a sentence naming the problem (the body's outcome is then its own ``Fail``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from parkway.errors import WorkflowError
from tasks.checks import text_ok

REJECT_POLICIES = ("first", "unreachable")


def _seconds(key: str, what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise WorkflowError(f"interaction {key}: {what} must be positive seconds, not {value!r}")
    return float(value)


def _names(key: str, what: str, names: Any) -> list[str]:
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise WorkflowError(f"interaction {key}: {what} must be a list of principal names")
    for name in names:
        text_ok(name, f"a name in {what} of interaction {key}")
    if len(set(names)) != len(names):
        raise WorkflowError(f"interaction {key}: {what} names a principal twice")
    return list(names)


def _escalation(key: str, levels: Any, expires_in: float | None) -> list[tuple[float, str | list[str]]]:
    """``[(after_seconds, target or [names]), ...]``, each after the one before and before the expiry."""
    if isinstance(levels, str) or not isinstance(levels, Sequence):
        raise WorkflowError(f"interaction {key}: escalate must be a list of (after_seconds, target) pairs")
    chain: list[tuple[float, str | list[str]]] = []
    for level in levels:
        if not isinstance(level, Sequence) or isinstance(level, str) or len(level) != 2:
            raise WorkflowError(f"interaction {key}: each escalation level is a pair (after_seconds, target)")
        after = _seconds(key, "an escalation's after", level[0])
        if chain and after <= chain[-1][0]:
            raise WorkflowError(f"interaction {key}: escalation levels must come in increasing order of time")
        if expires_in is not None and after >= expires_in:
            raise WorkflowError(
                f"interaction {key}: an escalation level at {after:g}s comes after its expiry ({expires_in:g}s)"
            )
        to = level[1]
        if isinstance(to, str):
            text_ok(to, f"the escalation target of interaction {key}")
            chain.append((after, to))
        else:
            chain.append((after, _names(key, "an escalation level", to)))
    return chain


def team_fields(item: Any, *, permission: bool) -> dict[str, Any]:
    """The ``InteractionSpec`` fields of a ``Question``'s or ``Permission``'s team options, checked."""
    key = item.key
    quorum = item.quorum
    if isinstance(quorum, bool) or not isinstance(quorum, int) or quorum < 1:
        raise WorkflowError(f"interaction {key}: quorum must be a whole number of responses, at least 1")
    assignees = _names(key, "assignees", item.assignees)
    if item.assignees_only and not assignees:
        raise WorkflowError(f"interaction {key}: assignees_only needs assignees")
    reminders = [_seconds(key, "remind_after", s) for s in item.remind_after]
    if reminders != sorted(set(reminders)):
        raise WorkflowError(f"interaction {key}: remind_after must be increasing delays")
    escalate = _escalation(key, item.escalate, item.expires_in)
    reject = getattr(item, "reject", "first")
    if reject not in REJECT_POLICIES or (reject != "first" and not permission):
        raise WorkflowError(f"interaction {key}: reject must be one of {', '.join(REJECT_POLICIES)} (permissions)")
    if item.assignees_only and all(isinstance(to, list) for _, to in escalate):
        # Only named principals can ever answer: a quorum they cannot reach is refused now.
        could = set(assignees).union(*(to for _, to in escalate if isinstance(to, list)))
        if quorum > len(could):
            raise WorkflowError(
                f"interaction {key}: quorum {quorum} is more than the {len(could)} principals who could ever answer"
            )
    return {"quorum": quorum, "assignees": assignees, "assignees_only": bool(item.assignees_only),
            "remind_after": reminders, "escalate": escalate, "reject": reject}  # fmt: skip


def named(items: Sequence[Any]) -> list[str]:
    """Every principal a Park's waits name (assignees, escalation levels), once each, in order."""
    names = [name for item in items for name in item.assignees]
    names += [name for item in items for _, to in item.escalate if not isinstance(to, str) for name in to]
    return list(dict.fromkeys(names))
