"""The other half of the split fleet: the continuation ``split_steps`` parks on."""

from typing import Any

from tasks.sdk import Complete, Context, continuation


@continuation("split.decide", version=1)
def decide(ctx: Context, snapshot: Any, answers: dict[str, Any]) -> Complete:
    return Complete(result={"go": answers["go"].value})
