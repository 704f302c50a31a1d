"""A decision for tests/acceptance/test_tracing.py, imported by its API and workers (PARKWAY_IMPORTS): a
question with a sensitive field, and a continuation that reads it, calls a tool and completes."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from tasks.sdk import Complete, Context, Park, Question, continuation, step

ASK, DONE = "trace.ask", "trace.done"
LOGGED = "the step body logs, as the test asked"  # a line written in the execution's span
SCHEMA = {
    "type": "object",
    "properties": {"user": {"type": "string"}, "otp": {"type": "string"}},
    "required": ["user", "otp"],
}


@step(ASK)
def ask(ctx: Context, payload: dict[str, Any]) -> Park:
    if payload.get("log"):
        logging.getLogger("tests.trace").warning(LOGGED)
    question = Question(key="otp", prompt="Your code?", schema=SCHEMA, target="team:ops", sensitive=["otp"])
    return Park(continuation=payload.get("continuation", f"{DONE}@1"), snapshot=payload, interactions=[question])


@continuation(DONE, version=1)
def done(ctx: Context, snapshot: dict[str, Any], answers: dict[str, Any]) -> Complete:
    """Reads the sensitive code, calls a tool with it, and on its first attempt waits (up to 60 s) for the
    flag file ``snapshot["flag"]`` when there is one (a test kills the worker meanwhile)."""
    code = answers["otp"].value["otp"]
    sent = ctx.tool("notify", key="notify", args={"code": code}, replay="safe", run=lambda: f"sent {len(code)}")
    flag = snapshot.get("flag")
    if flag and ctx.attempt == 1:
        Path(f"{flag}.running").touch()
        pause = threading.Event()
        for _ in range(1200):
            if Path(flag).exists():
                break
            pause.wait(0.05)
    return Complete(result={"user": answers["otp"].value["user"], "sent": sent})
