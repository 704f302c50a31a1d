"""Workflows only the API tests use, driven inline in the test process (never by a worker subprocess)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, SecretStr

from tasks.sdk import Complete, Context, Park, Question, continuation, step

OTP_SCHEMA = {
    "type": "object",
    "properties": {"user": {"type": "string"}, "otp": {"type": "string", "pattern": "^[0-9]{6}$"}},
    "required": ["user", "otp"],
    "additionalProperties": False,
}


@step("api.login")
def login(ctx: Context, payload: Any) -> Park:
    return Park(
        continuation="api.login_done@1",
        interactions=[
            Question(key="otp", prompt="Your code?", schema=OTP_SCHEMA, target="team:ops", sensitive=["otp"])
        ],
    )


@continuation("api.login_done", version=1)
def login_done(ctx: Context, snapshot: Any, answers: dict[str, Any]) -> Complete:
    code = answers["otp"].value["otp"]  # the sensitive field, readable here only
    if not (isinstance(code, str) and len(code) == 6):
        raise ValueError("the code did not reach its continuation")
    return Complete(result={"user": answers["otp"].value["user"]})


@step("api.elsewhere")
def elsewhere(ctx: Context, payload: Any) -> Park:
    """A question for a target other than the run's own."""
    return Park(
        continuation="api.login_done@1",
        interactions=[Question(key="otp", prompt="Code?", schema=OTP_SCHEMA, target=payload["ask"])],
    )


@step("api.ask_any")
def ask_any(ctx: Context, payload: Any) -> Park:
    """A question whose schema admits any JSON value: what reaches the store is the API's check alone."""
    return Park(
        continuation="api.login_done@1",
        interactions=[Question(key="any", prompt="Anything?", schema={}, target="team:ops")],
    )


class Deployment(BaseModel):
    """What ``api.deploy`` declares: a start without ``service`` is refused at the door."""

    service: str = Field(min_length=1)
    replicas: int = Field(default=1, ge=1)
    token: SecretStr | None = None  # sensitive: never echoed in an error


@step("api.deploy", payload=Deployment)
def deploy(ctx: Context, payload: Deployment) -> Complete:
    """Completes with what it received, so a test sees the model's instance arrived."""
    received = type(payload).__name__
    return Complete(result={"received": received, "service": payload.service, "replicas": payload.replicas})


WINDOW = {
    "type": "object",
    "properties": {"window": {"enum": ["now", "tonight"]}, "otp": {"type": "string", "writeOnly": True}},
    "required": ["window"],
}


@step("api.window", payload=WINDOW)
def window(ctx: Context, payload: Any) -> Complete:
    return Complete(result={"received": type(payload).__name__, "window": payload["window"]})
