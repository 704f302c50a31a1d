"""Every reference resolves: by string, by a module-level constant and by the decorated function itself."""

from typing import Any

from tasks.sdk import Complete, Context, Next, Park, Question, continuation, step

EXECUTE = "chk.execute"


@step("chk.plan")
def plan(ctx: Context, payload: Any) -> Park:
    return Park(continuation=decide, snapshot={}, interactions=[
        Question(key="go", prompt="Go?", schema={"type": "boolean"}, target="team:ops"),
    ])  # fmt: skip


@continuation("chk.decide", version=1)
def decide(ctx: Context, snapshot: Any, answers: dict[str, Any]) -> Next:
    return Next(execute, payload={"go": answers["go"].value})


@continuation("chk.decide", version=2)
def decide_v2(ctx: Context, snapshot: Any, answers: dict[str, Any]) -> Next:
    return Next(EXECUTE, payload={"go": answers["go"].value})


@step("chk.execute")
def execute(ctx: Context, payload: Any) -> Complete | Park:
    if payload.get("again"):
        return Park(continuation="chk.decide@2", snapshot={}, interactions=[])
    return Complete(result=payload)
