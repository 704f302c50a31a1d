"""Half of a fleet split by module: its step parks on a continuation only ``split_continuations`` registers."""

from typing import Any

from tasks.sdk import Context, Park, Question, step


@step("split.plan")
def plan(ctx: Context, payload: Any) -> Park:
    ask = Question(key="go", prompt="Go?", schema={"type": "boolean"}, target="team:ops")
    return Park(continuation="split.decide@1", snapshot={}, interactions=[ask])
