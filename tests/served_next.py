"""A module whose step hands on to another module's step (``tests.served_step``): a fleet split by module,
where a ``Next`` names a step only another worker runs."""

from __future__ import annotations

from typing import Any

from tasks.sdk import Context, Next, step


@step("served.first")
def first(ctx: Context, payload: dict[str, Any]) -> Next:
    return Next("served.second", payload=payload)
