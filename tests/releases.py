"""Two releases of workflow code, each a module a worker may import alone (``PARKWAY_IMPORTS``): a fleet
mid-deploy, where each worker runs only its own release's steps and continuations."""

from __future__ import annotations

from typing import Any

from tasks.sdk import Complete, Context, Park, Question, continuation, step
from tests.workflows import record_effect


def release(name: str) -> None:
    """Register release ``name``'s step ``<name>.ask`` and continuation ``<name>.done@1``."""

    def ask(ctx: Context, payload: dict[str, Any]) -> Park:
        question = Question(key="go", prompt=f"Release {name}?", schema={"type": "string"}, target="team:ops")
        return Park(continuation=f"{name}.done@1", snapshot=payload, interactions=[question])

    def done(ctx: Context, snapshot: dict[str, Any], answers: dict[str, Any]) -> Complete:
        record_effect(ctx, f"{name}.done")
        return Complete(result={"go": answers["go"].value})

    ask.__qualname__, done.__qualname__ = f"{name}_ask", f"{name}_done"
    step(f"{name}.ask")(ask)
    continuation(f"{name}.done", version=1)(done)
