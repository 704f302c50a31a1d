"""The HTTP worker protocol's bodies and answers (docs/worker-protocol.md; ``api/routes/worker_protocol.py``).
The outcome itself is ``models.outcome``'s, the one vocabulary the Python SDK uses too."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from api.schemas import TEXT, AnswerResponseOut, Body
from models.outcome import OutcomeJSON

KEY = r"^[^\x00@][^\x00]*$"
# A step name, or a continuation's name@version (version an integer >= 1): what ``checked_serves`` accepts.
SERVES_KEY: dict[str, JsonValue] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 200,
    "pattern": r"^[^\x00@]+(@0*[1-9][0-9]*)?$",
}
WorkerName = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@:/-]*$")
LEASE_S = Field(30.0, ge=5, le=600, description="how long the lease lasts without a heartbeat, in seconds")


def checked_serves(serves: list[Any]) -> None:
    """``ValueError`` (a 422) unless every key is a step name or ``name@version`` (a version >= 1)."""
    for key in serves:
        if not isinstance(key, str) or not key or len(key) > 200 or "\x00" in key:
            raise ValueError("serves lists step names and name@version keys (non-empty strings of 200 at most)")
        name, at, version = key.partition("@")
        if at and (not name or not (version.isascii() and version.isdigit()) or int(version) < 1):
            raise ValueError(f"{key!r}: a continuation key is name@version, the version an integer >= 1")


class LeaseAsk(Body):
    """What a lease call asks for, and what a completion's `lease` asks for: the next items."""

    worker: str = Field(
        min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@:/-]*$",
        description="a stable name of this worker process: how it shows in `GET /v1/workers`",
    )  # fmt: skip
    serves: list[Any] = Field(
        min_length=1, max_length=200, json_schema_extra={"items": SERVES_KEY},
        description="what it runs: step names (`deploy.plan`, leased as `start`) and continuation keys "
        "(`deploy.decide@1`, leased as `resume`); advertised in the worker registry by every lease call. It "
        "selects among the runs on targets the caller holds a live grant on (admins: any), never beyond them",
    )  # fmt: skip
    max: int = Field(
        1, ge=0, le=100, description="at most this many items; 0: lease nothing, only advertise (a busy worker)"
    )
    lease_s: float = LEASE_S

    @model_validator(mode="after")
    def _keys(self) -> LeaseAsk:
        checked_serves(self.serves)
        return self


class LeaseIn(LeaseAsk):
    wait_s: float = Field(20.0, ge=0, le=30, description="a long poll: wait this long for an item to come due")


class AnswerOut(BaseModel):
    status: str = Field(description="the interaction's status: answered, rejected, expired, canceled, ...")
    value: Any = Field(description="the answer's value (sensitive fields decrypted: only here)")
    approved: bool = Field(description="true only for an approved permission")
    answered_by: str | None
    responses: list[AnswerResponseOut] = Field(
        description="every response in order (a quorum wait's: docs/teams.md; else the one answer), values as `value`"
    )


class ItemOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    lease_id: str = Field(description="what every later call on this lease names, by its holder alone (else 404)")
    kind: Literal["start", "resume"]
    run_id: str
    step_id: str
    attempt: int = Field(description="1 on the first execution, +1 on each lease or claim after")
    name: str = Field(description="the step's name (start), or the continuation's name without its version")
    version: int | None = Field(description="the continuation's version (resume); null for a start")
    key: str = Field(description="what was served: the step name, or name@version")
    payload: Any = Field(None, description="the step's payload (start)")
    snapshot: Any = Field(None, description="what the parked step kept for its continuation (resume)")
    answers: dict[str, AnswerOut] | None = Field(None, description="the step's interactions by key (resume)")
    lease_expires_at: datetime
    traceparent: str | None = Field(
        None,
        description='when Parkway traces (docs/operations.md "Tracing"): the W3C trace context the item was '
        "handed out in; send it back as the `traceparent` header of this lease's calls to continue its trace",
    )


class LeasePage(BaseModel):
    items: list[ItemOut] = Field(description="empty when nothing came due within `wait_s`")


class HeartbeatIn(Body):
    lease_s: float = LEASE_S


class HeartbeatOut(BaseModel):
    lease_expires_at: datetime


class CompleteIn(Body):
    outcome: OutcomeJSON = Field(description="park | next | complete | fail, by its `type`")
    lease: LeaseAsk | None = Field(
        None,
        description="also lease the next items (as `POST /v1/worker/lease` with `wait_s` 0), handed out "
        "in the answer of the request that commits: a busy worker makes one request per item",
    )


class ReceiptOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    lease_id: str
    run_id: str
    step_id: str
    outcome: Literal["park", "next", "complete", "fail"]
    run_status: str = Field(description="the run's status right after this commit")
    committed_at: datetime
    items: list[ItemOut] = Field(
        default_factory=list,
        description="the next items the completion's `lease` took (never on an exact retry: the items of an "
        "answer that was lost come back when their leases run out)",
    )


class ReleaseIn(Body):
    reason: str | None = Field(None, max_length=2000, pattern=TEXT, description="why it is given back (logged)")


class ReleaseOut(BaseModel):
    lease_id: str
    continuation_status: str = Field(description="ready (driven again), or dead when out of attempts")
    attempts: int
    run_status: str


class ToolIntentIn(Body):
    name: str = Field(min_length=1, max_length=200, pattern=TEXT)
    key: str = Field(min_length=1, max_length=200, pattern=TEXT, description="unique within the step")
    args: Any = Field(None, description="journaled as a digest only: a re-execution must send the same")
    replay: Literal["safe", "never"]


class ToolOutcomeIn(Body):
    model_config = ConfigDict(json_schema_extra={"minProperties": 1, "maxProperties": 1})  # result or error

    result: Any = None
    error: str | None = Field(None, min_length=1, pattern=TEXT)

    @model_validator(mode="after")
    def _one(self) -> ToolOutcomeIn:
        if ("result" in self.model_fields_set) == ("error" in self.model_fields_set):
            raise ValueError("send either result or error")
        return self


class ToolStateOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    state: Literal["run", "settled"] = Field(description="run: the intent is durable, run it now; settled: do not")
    result: Any = None
    error: str | None = None
    possibly_ran: bool = Field(False, description="a never call a lost lease left executing: never run again")
