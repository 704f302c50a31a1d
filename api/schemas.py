"""Request and response bodies of the HTTP API (docs/api.md). Times are ISO 8601 UTC."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from models.access import InteractionView, RunView, public_value, redacted
from models.history import RunLine
from models.outcome import Park as ParkOutcome
from models.status import normalize_run_status
from models.tables import Review, Step, ToolCall

# Text columns cannot hold NUL (PostgreSQL refuses it): every string the API stores or looks up excludes it.
TEXT = r"^[^\x00]*$"
PrincipalKindLiteral = Literal["agent", "human", "admin", "worker", "auditor"]
ID = r"^[A-Za-z0-9_-]{1,64}$"


class Body(BaseModel):
    """Request bodies refuse unknown fields: a field the API does not read (``owner``) is an error."""

    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- runs


class RunCreate(Body):
    workflow: str = Field(
        min_length=1, max_length=200, pattern=TEXT, description="the name of the workflow's first step"
    )
    payload: Any = Field(default_factory=dict, description="any JSON value, handed to the first step")
    target: str = Field(min_length=1, max_length=200, description="the target the run is for, e.g. `team:ops`")
    park: ParkOutcome | None = Field(
        None,
        description="park the first step at once (an agent running its own loop): its continuation, snapshot and "
        "interactions, as a `park` outcome (its `type` may be left out); the run answers `waiting`",
    )


class StepOut(BaseModel):
    id: str
    seq: int
    name: str
    status: str
    created_at: datetime
    updated_at: datetime
    error: str | None
    reason: str | None

    @classmethod
    def of(cls, step: Step) -> StepOut:
        return cls(
            id=step.id,
            seq=step.seq,
            name=step.name,
            status=step.status,
            created_at=step.created_at,
            updated_at=step.updated_at,
            error=step.error,
            reason=step.reason,
        )


class ToolCallOut(BaseModel):
    key: str
    name: str
    phase: Literal["authorizing", "executing", "settled"]
    replay: Literal["safe", "never"]
    possibly_ran: bool
    outcome: str | None = Field(
        default=None, description='a summary once settled: "ok" or "error: …" (never arguments or values)'
    )

    @classmethod
    def of(cls, call: ToolCall) -> ToolCallOut:
        summary = None
        if call.phase == "settled":
            summary = "ok" if call.error is None else f"error: {call.error[:200]}"
        return cls(
            key=call.key,
            name=call.name,
            phase=call.phase,  # type: ignore[arg-type]
            replay=call.replay,  # type: ignore[arg-type]
            possibly_ran=call.possibly_ran,
            outcome=summary,
        )


class ReviewOut(BaseModel):
    id: str
    kind: str
    status: str
    verdict: str | None
    finding_count: int | None
    verification_count: int | None
    reason: str | None

    @classmethod
    def of(cls, review: Review) -> ReviewOut:
        return cls(
            id=review.id,
            kind=review.kind,
            status=review.status,
            verdict=review.verdict,
            finding_count=review.finding_count,
            verification_count=review.verification_count,
            reason=review.reason,
        )


class AnswerResponseOut(BaseModel):
    """A response as a continuation reads it (a lease item's ``answers``)."""

    principal: str
    value: Any = Field(description='sensitive fields "***" on every read (decrypted only in a worker\'s lease item)')
    at: datetime
    level: int = Field(description="the escalation level of the wait when it came")


class ResponseOut(AnswerResponseOut):
    """A response as the Interaction resource shows it: with the place it was made in."""

    place: str = Field(serialization_alias="for", description="in whose place: principal's own, or a delegator's")

    model_config = ConfigDict(serialize_by_alias=True)


class EscalationOut(BaseModel):
    after: float = Field(description="seconds after the park")
    to: str | list[str] = Field(description="a target whose grants may then answer, or principals by name")


class DelegationOut(BaseModel):
    to: str = Field(description="the delegate, who answers in that place from then on")
    by: str = Field(description="who delegated: the place is theirs no more")
    place: str = Field(serialization_alias="for", description="whose place it moved: by's own, or one delegated to by")
    note: str | None
    at: datetime

    model_config = ConfigDict(serialize_by_alias=True)


class InteractionOut(BaseModel):
    id: str
    run_id: str
    step_id: str
    key: str
    kind: Literal["question", "permission"]
    prompt: str | None
    schema_: Any = Field(alias="schema", description="the JSON Schema of the answer's value")
    action: str | None
    resources: list[str] | None
    target: str
    status: Literal["pending", "answered", "rejected", "canceled", "expired", "interrupted"]
    expires_at: datetime | None
    answered_by: str | None
    answered_at: datetime | None
    value: Any = Field(description='null unless answered; sensitive fields are always "***"')
    sensitive: list[str]
    created_at: datetime
    closed_at: datetime | None
    reason: str | None
    quorum: int = Field(description="responses in distinct places it needs (1: the first response wins)")
    responses: list[ResponseOut] = Field(description="every response so far, in order; sensitive fields as ***")
    level: int = Field(description="the escalation level reached (0: none yet)")
    answered_level: int | None = Field(description="the level at which the decision came")
    assignees: list[str] = Field(description="the principals it names as answerers")
    assignees_only: bool = Field(description="only those it names may answer (not the target's grants)")
    justify: bool = Field(False, description="an answer through an approval link must give a justification")
    escalate: list[EscalationOut] = Field(description="its escalation chain; level k is escalate[k-1]")
    delegations: list[DelegationOut]
    reminders: int = Field(description="interaction.reminded events written so far")

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    @classmethod
    def of(cls, view: InteractionView) -> InteractionOut:
        i = view.interaction
        return cls(
            id=i.id,
            run_id=i.run_id,
            step_id=i.step_id,
            key=i.key,
            kind=i.kind,  # type: ignore[arg-type]
            prompt=i.prompt,
            schema=i.schema,
            action=i.action,
            resources=i.resources,
            target=i.target,
            status=i.status,  # type: ignore[arg-type]
            expires_at=i.expires_at,
            answered_by=view.answered_by,
            answered_at=i.answered_at,
            value=public_value(i),
            sensitive=[str(k) for k in (i.sensitive or [])],
            created_at=i.created_at,
            closed_at=i.closed_at,
            reason=i.reason,
            quorum=i.quorum,
            responses=[ResponseOut(principal=r.principal, place=r.place, value=redacted(i, r.value), at=r.at,
                                   level=r.level) for r in view.responses],
            level=i.level,
            answered_level=i.answered_level,
            assignees=view.assignees,
            assignees_only=bool((i.team or {}).get("assignees_only")),
            justify=bool((i.team or {}).get("justify")),
            escalate=[EscalationOut(**level) for level in (i.team or {}).get("escalate", [])],
            delegations=[DelegationOut(to=d.to, by=d.by, place=d.place, note=d.note, at=d.at)
                         for d in view.delegations],
            reminders=i.reminders,
        )  # fmt: skip


RunStatusLiteral = Literal["running", "waiting", "completed", "failed", "canceled", "interrupted"]


class RunOut(BaseModel):
    id: str
    workflow: str
    title: str | None = Field(None, description="what the run is about, as a step said it (`ctx.set_title`)")
    status: RunStatusLiteral
    owner: str = Field(description="the agent that started the run (from its token, never from a body)")
    target: str
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    result: Any
    error: str | None
    error_details: Any = Field(
        None,
        description="a failed run's Fail details, or the partial-failure context of a step that returned "
        "Complete while its review was running; null otherwise",
    )
    reason: str | None
    finished_on: str | None = Field(
        None, description="who committed its terminal state, as `<node> pid <pid>` (a worker's Celery node name)"
    )
    interactions: list[InteractionOut] = Field(description="the open (pending) interactions")
    tool_calls: list[ToolCallOut]
    reviews: list[ReviewOut]
    steps: list[StepOut]
    warnings: list[str] = Field(default_factory=list, description="e.g. a legacy status word normalized on read")
    unserved: list[str] = Field(
        default_factory=list,
        description="the continuation versions (`name@version`) its open interactions resume that no live worker "
        "runs now: unless one starts, the run is interrupted once PARKWAY_VERSION_GRACE_S has passed",
    )

    @classmethod
    def of(cls, view: RunView) -> RunOut:
        run = view.run
        status, warning = normalize_run_status(run.status)
        return cls(
            id=run.id,
            workflow=run.workflow,
            title=run.title,
            status=status.value,
            owner=view.owner,
            target=run.target,
            created_at=run.created_at,
            updated_at=run.updated_at,
            completed_at=run.completed_at,
            result=run.result,
            error=run.error,
            error_details=run.error_details,
            reason=run.reason,
            finished_on=run.finished_on,
            interactions=[InteractionOut.of(i) for i in view.open_interactions],
            tool_calls=[ToolCallOut.of(c) for c in view.tool_calls],
            reviews=[ReviewOut.of(r) for r in view.reviews],
            steps=[StepOut.of(s) for s in view.steps],
            warnings=[*(run.warnings or []), *([warning] if warning else [])],
            unserved=view.unserved,
        )


# --------------------------------------------------------------------------- interactions


class AnswerIn(Body):
    response_id: str = Field(min_length=1, max_length=200, pattern=TEXT, description="the client's id for it")
    value: Any = Field(description="a JSON value matching the interaction's schema")


class CancelIn(Body):
    response_id: str = Field(min_length=1, max_length=200, pattern=TEXT)
    reason: str | None = Field(default=None, max_length=2000, pattern=TEXT)


class DelegateIn(Body):
    to: str = Field(min_length=1, max_length=200, pattern=TEXT, description="the delegate's principal name")
    note: str | None = Field(default=None, max_length=2000, pattern=TEXT)


class DelegationReceiptOut(DelegationOut):
    interaction_id: str


class AnswerReceiptOut(BaseModel):
    status: Literal["answered", "rejected", "pending"] = Field(
        description='"pending": a response recorded towards a quorum that it did not reach (docs/teams.md)'
    )
    response_id: str
    answered_at: datetime


class CancelReceiptOut(BaseModel):
    status: Literal["canceled"]
    response_id: str
    canceled_at: datetime


class RunLineOut(BaseModel):
    """A run as a list shows it: a run's own fields, without its steps, interactions, tool calls and reviews
    (read one run for those)."""

    id: str
    workflow: str
    status: RunStatusLiteral
    owner: str
    target: str
    created_at: datetime
    completed_at: datetime | None
    result: Any
    error: str | None
    reason: str | None
    pending: int = Field(description="its interactions still waiting for someone")

    @classmethod
    def of(cls, line: RunLine) -> RunLineOut:
        run = line.run
        status, _ = normalize_run_status(run.status)
        return cls(id=run.id, workflow=run.workflow, status=status.value, owner=line.owner, target=run.target,
                   created_at=run.created_at, completed_at=run.completed_at, result=run.result, error=run.error,
                   reason=run.reason, pending=line.pending)  # fmt: skip


class RunPage(BaseModel):
    items: list[RunLineOut]
    next: str | None = Field(description="pass back as `?cursor=` for the next page; null on the last")


class InteractionPage(BaseModel):
    items: list[InteractionOut]
    next: str | None = Field(description="pass back as `?cursor=` for the next page; null on the last")
