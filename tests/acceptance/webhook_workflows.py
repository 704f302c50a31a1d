"""A workflow asking a question with a sensitive field: run by tests/acceptance/test_webhooks.py's workers."""

from __future__ import annotations

from typing import Any

from tasks.sdk import Complete, Context, Park, Question, continuation, step

SCHEMA = {
    "type": "object",
    "properties": {"user": {"type": "string"}, "otp": {"type": "string"}},
    "required": ["user", "otp"],
}


@step("wh.login")
def login(ctx: Context, payload: Any) -> Park:
    return Park(
        continuation="wh.login_done@1",
        interactions=[Question(key="otp", prompt="Your code?", schema=SCHEMA, target="team:ops", sensitive=["otp"])],
    )


@continuation("wh.login_done", version=1)
def login_done(ctx: Context, snapshot: Any, answers: dict[str, Any]) -> Complete:
    return Complete(result={"user": answers["otp"].value["user"], "digits": len(answers["otp"].value["otp"])})
