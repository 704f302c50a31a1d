"""The A/B bench's workflow, imported by any tree's worker (``PARKWAY_IMPORTS=parkway_bench_flows``).

Only the SDK's contract names are used, so the same file runs on the tree before the redesign and after
it. ``abbench.ask`` parks on one question; ``abbench.done@1`` completes the run and, first thing, pushes
``"<run_id> <time>"`` to a Redis list: the driver reads body starts from it (latency, and which runs are
left to commit).
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis

from tasks.sdk import Complete, Park, Question, continuation, step

TARGET = "team:abbench"
ASK = "abbench.ask"
STARTED_KEY = "abbench:started"

_client: dict[str, Any] = {"pid": None, "redis": None}


def started_list() -> Any:
    """A Redis client per process (again after fork), on the broker the tree's processes share."""
    if _client["pid"] != os.getpid():
        _client.update(pid=os.getpid(), redis=redis.Redis.from_url(os.environ["PARKWAY_BROKER_URL"]))
    return _client["redis"]


@step(ASK)
def ask(ctx: Any, payload: dict[str, Any]) -> Park:
    return Park(
        continuation="abbench.done@1",
        snapshot={},
        interactions=[Question(key="go", prompt="Go?", schema={"type": "string"}, target=TARGET)],
    )


@continuation("abbench.done", version=1)
def done(ctx: Any, snapshot: dict[str, Any], answers: dict[str, Any]) -> Complete:
    started_list().rpush(STARTED_KEY, f"{ctx.run_id} {time.time():.6f}")
    return Complete(result={"go": answers["go"].value})
