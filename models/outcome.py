"""The one outcome vocabulary: what a step or continuation returns, whether its body runs in Python (the
SDK's ``Park``/``Next``/``Complete``/``Fail`` with ``Question``/``Permission``, ``tasks.sdk``) or behind the
HTTP worker protocol (the same types as JSON, ``{"type": "park", ...}``: docs/worker-protocol.md).

Plain dataclasses: a body builds them without validation (``tasks.outcomes.check_outcome`` judges them
before anything commits, whoever made them); ``OUTCOME`` reads them from JSON and publishes their JSON
Schema in the OpenAPI. ``type`` and ``kind`` tell the variants apart and are keyword-only, so the SDK's
constructors keep their positional signatures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter

from models.jsonsafe import interaction_id

# An escalation level: after so many seconds from the park, a target (its grants may answer) or named people.
Escalation = tuple[float, str | Sequence[str]]


@dataclass(frozen=True)
class Question:
    key: str
    prompt: str
    schema: dict[str, Any]
    target: str
    expires_in: float | None = None
    sensitive: Sequence[str] = ()
    # Teams (docs/teams.md): as Permission's but ``reject``; the continuation gets every response
    # (``answers[key].responses``).
    quorum: int = field(default=1, kw_only=True)
    assignees: Sequence[str] = field(default=(), kw_only=True)
    assignees_only: bool = field(default=False, kw_only=True)
    remind_after: Sequence[float] = field(default=(), kw_only=True)
    escalate: Sequence[Escalation] = field(default=(), kw_only=True)
    justify: bool = field(default=False, kw_only=True)  # each decision must say why (docs/teams.md)
    kind: Literal["question"] = field(default="question", kw_only=True)


@dataclass(frozen=True)
class Permission:
    key: str
    action: str
    resources: Sequence[str]
    target: str
    expires_in: float | None = None
    request_id: str | None = None  # set by ctx.tool's preflight: deterministic for (call, action, resources)
    # Teams (docs/teams.md): responses needed from distinct principals, who may answer (named approvers, on
    # top of the target's grants or alone), reminders and escalation levels (seconds after the park); reject
    # "unreachable": rejected only once ``quorum`` approvals can no longer come (else at the first rejection).
    quorum: int = field(default=1, kw_only=True)
    assignees: Sequence[str] = field(default=(), kw_only=True)
    assignees_only: bool = field(default=False, kw_only=True)
    remind_after: Sequence[float] = field(default=(), kw_only=True)
    escalate: Sequence[Escalation] = field(default=(), kw_only=True)
    reject: Literal["first", "unreachable"] = field(default="first", kw_only=True)
    justify: bool = field(default=False, kw_only=True)  # each decision must say why (docs/teams.md)
    kind: Literal["permission"] = field(default="permission", kw_only=True)


Interaction = Annotated[Question | Permission, Field(discriminator="kind")]


@dataclass(frozen=True)
class Park:
    continuation: str
    interactions: Sequence[Interaction]
    snapshot: Any = None
    type: Literal["park"] = field(default="park", kw_only=True)


@dataclass(frozen=True)
class Next:
    step: str
    payload: Any = None
    type: Literal["next"] = field(default="next", kw_only=True)


@dataclass(frozen=True)
class Complete:
    result: Any = None
    type: Literal["complete"] = field(default="complete", kw_only=True)


@dataclass(frozen=True)
class Fail:
    error: str
    details: Any = None
    type: Literal["fail"] = field(default="fail", kw_only=True)


Outcome = Park | Next | Complete | Fail


@dataclass
class InteractionSpec:
    """A validated interaction to create when a step parks."""

    key: str
    kind: str
    target: str
    prompt: str | None = None
    schema: Any = None
    action: str | None = None
    resources: list[str] | None = None
    sensitive: list[str] = field(default_factory=list)
    expires_in: float | None = None
    id: str | None = None  # a deterministic id chosen by the caller (tool permission requests)
    # Teams (docs/teams.md), checked by models.checks.team_fields: ``team()`` is None when none is used.
    quorum: int = 1
    assignees: list[str] = field(default_factory=list)
    assignees_only: bool = False
    remind_after: list[float] = field(default_factory=list)
    escalate: list[tuple[float, str | list[str]]] = field(default_factory=list)
    reject: str = "first"
    justify: bool = False

    def interaction_id(self, step_id: str) -> str:
        return self.id or interaction_id(step_id, self.key, self.kind, self.resources)

    def team(self) -> dict[str, Any] | None:
        """The options as the interaction's ``team`` column keeps them; ``None`` when none is used."""
        team = {"assignees": self.assignees, "assignees_only": self.assignees_only, "reject": self.reject,
                "remind_after": self.remind_after,
                "escalate": [{"after": after, "to": to} for after, to in self.escalate],
                **({"justify": True} if self.justify else {})}  # fmt: skip
        used = self.assignees or self.remind_after or self.escalate or self.reject != "first" or self.justify
        return team if used else None


OutcomeJSON = Annotated[Outcome, Field(discriminator="type")]

# Reads an outcome from JSON (strict about the shape, never about the values' meaning: see check_outcome).
# Built on first use: a process that only declares workflows never needs them.
_LATER = ConfigDict(defer_build=True)
OUTCOME: TypeAdapter[Outcome] = TypeAdapter(OutcomeJSON, config=_LATER)
INTERACTIONS: TypeAdapter[list[Question | Permission]] = TypeAdapter(list[Interaction], config=_LATER)
