"""The events of a run, typed by family (``GET /v1/runs/{id}/events`` and the ``/v1/events/stream`` frames).

Each event is ``{seq, run_id, type, at, data}``; ``type`` names the family before its dot (``run.created``,
``step.parked``, ``interaction.answered`` …) and the family fixes the fields ``data`` may have. A field a
family does not list still comes through, and a type this code does not know is an ``OtherEvent``, so a
newer server never breaks an older client. Sensitive values never appear in any event.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Discriminator, Field, JsonValue, Tag, TypeAdapter

from models.tables import Event


class EventData(BaseModel):
    """Fields every event's ``data`` has; the families add theirs, all optional."""

    model_config = ConfigDict(extra="allow")

    run_id: str


class RunEventData(EventData):
    workflow: str | None = Field(default=None, description="every run event")
    owner: str | None = Field(default=None, description="run.created: the agent that started it")
    target: str | None = Field(default=None, description="run.created")
    status: str | None = Field(default=None, description="the terminal status, on the run's terminal event")
    execution_id: str | None = Field(default=None, description="on the terminal event: the execution that ended it")
    error: str | None = None
    error_details: Any = None
    reason: str | None = None


class StepEventData(EventData):
    step_id: str | None = None
    name: str | None = Field(default=None, description="the step's name")
    continuation: str | None = Field(default=None, description="step.parked: the continuation as name@version")
    continuation_id: str | None = None
    next: str | None = Field(default=None, description="step.completed with a Next: the next step's name")
    reason: str | None = None


class InteractionEventData(EventData):
    interaction_id: str
    step_id: str | None = None
    key: str | None = None
    kind: Literal["question", "permission"] | None = Field(default=None, description="on every interaction event")
    target: str | None = Field(default=None, description="on every interaction event")
    status: str | None = Field(default=None, description="the status it closed with, on the events that close it")
    answered_by: str | None = None
    canceled_by: str | None = None
    reason: str | None = None
    # Teams (docs/teams.md): interaction.responded / .delegated / .reminded / .escalated, and on a decision.
    principal: str | None = Field(default=None, description="interaction.responded: who responded")
    responses: int | None = Field(default=None, description="responses so far, of quorum")
    quorum: int | None = None
    level: int | None = Field(default=None, description="the escalation level (reached, or the decision's)")
    by: str | None = Field(default=None, description="interaction.delegated: the delegator")
    to: Any = Field(default=None, description="interaction.delegated: the delegate; .escalated: the level's target")
    reminder: int | None = Field(default=None, description="interaction.reminded: its number, from 1")


class ContinuationEventData(EventData):
    continuation_id: str
    step_id: str | None = None
    name: str | None = None
    reason: str | None = None


class ToolCallEventData(EventData):
    key: str
    name: str | None = Field(default=None, description="the tool's name")
    replay: Literal["safe", "never"] | None = Field(default=None, description="on every tool-call event")
    phase: Literal["authorizing", "executing", "settled"] | None = Field(
        default=None, description="the phase it entered, on every tool-call event"
    )
    ok: bool | None = Field(default=None, description="toolcall.settled: whether it returned without error")


class ReviewEventData(EventData):
    review_id: str
    step_id: str | None = None
    kind: str | None = None
    verdict: str | None = None
    finding_count: int | None = None
    verification_count: int | None = None
    reason: str | None = None


class EventBase(BaseModel):
    seq: int = Field(description="the event's position in the log; the stream's `id:`")
    run_id: str
    at: datetime
    trace_id: str | None = Field(
        default=None, description='the trace of the change it records, when traced (docs/operations.md "Tracing")'
    )


class RunEvent(EventBase):
    type: Literal["run.created", "run.completed", "run.failed", "run.canceled", "run.interrupted"]
    data: RunEventData


class StepEvent(EventBase):
    type: Literal["step.parked", "step.resumed", "step.completed", "step.failed", "step.canceled", "step.interrupted"]
    data: StepEventData


class InteractionEvent(EventBase):
    type: Literal[
        "interaction.asked",
        "interaction.answered",
        "interaction.rejected",
        "interaction.canceled",
        "interaction.expired",
        "interaction.interrupted",
        "interaction.responded",
        "interaction.delegated",
        "interaction.reminded",
        "interaction.escalated",
    ]
    data: InteractionEventData


class ContinuationEvent(EventBase):
    type: Literal["continuation.ready", "continuation.dead"]
    data: ContinuationEventData


class ToolCallEvent(EventBase):
    type: Literal["toolcall.intent", "toolcall.authorized", "toolcall.possibly_ran", "toolcall.settled"]
    data: ToolCallEventData


class ReviewEvent(EventBase):
    type: Literal["review.started", "review.completed", "review.failed", "review.interrupted"]
    data: ReviewEventData


class OtherEvent(EventBase):
    """An event of a type this version does not describe (never one of the types above: ``oneOf`` holds)."""

    type: str = Field(json_schema_extra=lambda schema: _not_a_known_type(schema))
    data: dict[str, Any]


FAMILIES: dict[str, type[EventBase]] = {
    "run": RunEvent,
    "step": StepEvent,
    "interaction": InteractionEvent,
    "continuation": ContinuationEvent,
    "toolcall": ToolCallEvent,
    "review": ReviewEvent,
}
_FAMILY_OF: dict[str, str] = {
    type_: family for family, cls in FAMILIES.items() for type_ in get_args(cls.model_fields["type"].annotation)
}


def _not_a_known_type(schema: dict[str, JsonValue]) -> None:
    known: list[JsonValue] = [*sorted(_FAMILY_OF)]
    schema["not"] = {"enum": known}


def family(value: Any) -> str:
    """The family tag of an event (a model or its JSON), ``other`` for a type not described here."""
    type_ = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return _FAMILY_OF.get(str(type_), "other")


AnyEvent = Annotated[
    Annotated[RunEvent, Tag("run")]
    | Annotated[StepEvent, Tag("step")]
    | Annotated[InteractionEvent, Tag("interaction")]
    | Annotated[ContinuationEvent, Tag("continuation")]
    | Annotated[ToolCallEvent, Tag("toolcall")]
    | Annotated[ReviewEvent, Tag("review")]
    | Annotated[OtherEvent, Tag("other")],
    Discriminator(family),
]


TypedEvent = RunEvent | StepEvent | InteractionEvent | ContinuationEvent | ToolCallEvent | ReviewEvent | OtherEvent
_ADAPTER: TypeAdapter[TypedEvent] = TypeAdapter(AnyEvent)


def event_out(event: Event) -> TypedEvent:
    """The typed model of a stored event."""
    fields = {"seq": event.seq, "run_id": event.run_id, "type": event.type, "at": event.at, "data": event.data or {}}
    return _ADAPTER.validate_python({**fields, "trace_id": event.trace_id})


def sse_item_schema() -> dict[str, Any]:
    """One message of the event stream, as OpenAPI 3.2's ``itemSchema`` of ``text/event-stream`` describes
    it (what FastAPI's own SSE routes emit): ``data`` is JSON text of one of the event schemas."""
    described: list[type[EventBase]] = [*FAMILIES.values(), OtherEvent]
    events = [{"$ref": f"#/components/schemas/{cls.__name__}"} for cls in described]
    return {
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "^[0-9]+$", "description": "the event's `seq`: `Last-Event-ID`"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"oneOf": events},
                "description": "the event, as an item of `GET /v1/runs/{run_id}/events`",
            },
            "retry": {"type": "integer", "minimum": 0, "description": "the first message only: no `id` or `data`"},
        },
    }


class EventPage(BaseModel):
    items: list[AnyEvent]
    next: str | None = Field(description="pass back as `?cursor=` (or `?after=`) for the next page")
