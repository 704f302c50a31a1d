"""References that do not resolve, each on a line tests/cli/test_check.py names."""

from typing import Any

from tasks.sdk import Complete, Context, Next, Park, Question, continuation, step

ASK = [Question(key="go", prompt="Go?", schema={"type": "boolean"}, target="team:ops")]


@step("dangle.plan")
def plan(ctx: Context, payload: Any) -> Park:
    if payload.get("old"):
        return Park(continuation="dangle.decide@1", snapshot={}, interactions=ASK)
    return Park(continuation="dangle.decide@2", snapshot={}, interactions=ASK)  # DANGLING: version 2


@continuation("dangle.decide", version=1)
def decide(ctx: Context, snapshot: Any, answers: dict[str, Any]) -> Next:
    if answers["go"].value:
        return Next("dangle.exec", payload={})  # DANGLING: a typo of dangle.execute
    return Next(helper, payload={})  # DANGLING: not a step


@step("dangle.execute")
def execute(ctx: Context, payload: Any) -> Complete:
    return Complete(result=payload)


def helper(ctx: Context, payload: Any) -> Complete:
    return Complete()
