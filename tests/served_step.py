"""The step ``tests.served_next`` hands on to, in a module of its own (its worker may be down)."""

from __future__ import annotations

from typing import Any

from tasks.sdk import Complete, Context, step
from tests.workflows import record_effect


@step("served.second")
def second(ctx: Context, payload: dict[str, Any]) -> Complete:
    record_effect(ctx, "served.second")
    return Complete(result=payload)
