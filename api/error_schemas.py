"""The error bodies of the HTTP API, one model per kind (docs/api.md "Errors"); ``api.errors`` renders them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from api.schemas import InteractionOut, RunStatusLiteral


class ErrorBody(BaseModel):
    """Every error: a stable code and a sentence (401, 403, 404, 405, 413, 500, 503, a taken name's 409)."""

    error: str = Field(description="a stable machine-readable code, e.g. `forbidden`, `not_found`, `unavailable`")
    detail: str = Field(description="a sentence for people")


class PayloadProblem(BaseModel):
    """One way a run's payload misses what its workflow declares (pydantic's ``loc``, ``msg``, ``type``)."""

    loc: list[str | int] = Field(description='where, from the body\'s `payload`: `["payload", "service"]`')
    msg: str = Field(description="what is wrong; never the value sent")
    type: str = Field(description="which rule: pydantic's error type, or the JSON Schema keyword")


class ValidationErrorBody(ErrorBody):
    """422: the request, or an answer's value, is not valid, or a start's workflow is unknown
    (`unknown_workflow`) or refuses its payload (`invalid_payload`, with `problems`); nothing was stored."""

    errors: list[str] | None = Field(default=None, description="each problem found, where one is named")
    problems: list[PayloadProblem] | None = Field(default=None, description="with `invalid_payload`: each problem")


class InteractionState(InteractionOut):
    """An interaction as ``GET /v1/interactions/{id}`` shows it, with the status of its run."""

    run_status: RunStatusLiteral


class InteractionConflict(ErrorBody):
    """409 on an answer or cancel: another response won; ``state`` is the interaction as it is now."""

    error: Literal["conflict"]
    state: InteractionState


class InteractionGone(ErrorBody):
    """410 on an answer or cancel: the wait ended without an answer; ``state`` says how, and the run's status."""

    error: Literal["gone"]
    state: InteractionState


class RunConflictState(BaseModel):
    run_id: str = Field(description="the run this idempotency key started")
    status: RunStatusLiteral


class RunConflict(ErrorBody):
    """409 on starting a run: the idempotency key already started a run with another request."""

    error: Literal["conflict"]
    state: RunConflictState
