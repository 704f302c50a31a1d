"""Workflows the tests run in real worker processes (imported through PARKWAY_IMPORTS)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text

from tasks.sdk import Complete, Context, Fail, Next, Park, Permission, Question, continuation, step

EFFECTS_DDL = "CREATE TABLE IF NOT EXISTS test_effects (run_id VARCHAR(64) NOT NULL, tag VARCHAR(64) NOT NULL)"


def record_effect(ctx: Context, tag: str) -> None:
    """The committed effect the tests count: written in the step's commit transaction, so exactly once."""

    def write(session: Any) -> None:
        session.execute(text("INSERT INTO test_effects (run_id, tag) VALUES (:r, :t)"), {"r": ctx.run_id, "t": tag})

    ctx.in_commit(write)


@step("t.ask_two")
def ask_two(ctx: Context, payload: dict[str, Any]) -> Park:
    return Park(
        continuation="t.finish@1",
        snapshot={"service": payload.get("service", "api")},
        interactions=[
            Question(
                key="window",
                prompt="When?",
                schema={"type": "string", "enum": ["now", "tonight"]},
                target="team:ops",
                expires_in=payload.get("expires_in"),
            ),
            Question(key="reason", prompt="Why?", schema={"type": "string", "minLength": 1}, target="team:ops"),
        ],
    )


@continuation("t.finish", version=1)
def finish(ctx: Context, snapshot: dict[str, Any], answers: dict[str, Any]) -> Complete:
    record_effect(ctx, "finish")
    return Complete(
        result={
            "service": snapshot["service"],
            "window": answers["window"].value,
            "window_status": answers["window"].status,
            "reason": answers["reason"].value,
            "by": answers["window"].answered_by,
        }
    )


@step("t.ask_one")
def ask_one(ctx: Context, payload: dict[str, Any]) -> Park:
    return Park(
        continuation=payload.get("continuation", "t.one_done@1"),
        snapshot=payload,
        interactions=[
            Question(
                key="go",
                prompt="Go?",
                schema={"type": "string"},
                target="team:ops",
                expires_in=payload.get("expires_in"),
            )
        ],
    )


@continuation("t.one_done", version=1)
def one_done(ctx: Context, snapshot: dict[str, Any], answers: dict[str, Any]) -> Complete | Next:
    if snapshot.get("then"):
        return Next(snapshot["then"], payload={"go": answers["go"].value})
    record_effect(ctx, "one_done")
    return Complete(result={"go": answers["go"].value})


@continuation("t.expiry_done", version=1)
def expiry_done(ctx: Context, snapshot: dict[str, Any], answers: dict[str, Any]) -> Complete:
    record_effect(ctx, "expiry_done")
    return Complete(result={"status": answers["go"].status, "value": answers["go"].value})


@step("t.review")
def review(ctx: Context, payload: dict[str, Any]) -> Complete:
    """Starts a review, records progress, optionally waits for a flag file (to be killed there)."""
    review_id = ctx.start_review("lint")
    ctx.review_progress(review_id, finding_count=3, verification_count=2)
    flag = payload.get("wait_for")
    if flag and ctx.attempt == 1:
        deadline = time.monotonic() + 60
        while not Path(flag).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    if not payload.get("leave_running"):
        ctx.record_review(review_id, "clean", 3, 2)
    record_effect(ctx, "review")
    return Complete(result={"review": review_id})


@step("t.after")
def after(ctx: Context, payload: dict[str, Any]) -> Complete:
    record_effect(ctx, "after")
    return Complete(result={"after": payload})


@step("t.permission")
def permission(ctx: Context, payload: dict[str, Any]) -> Park:
    return Park(
        continuation="t.permission_done@1",
        snapshot={},
        interactions=[Permission(key="shell", action="shell.exec", resources=[payload["cmd"]], target="team:ops")],
    )


@continuation("t.permission_done", version=1)
def permission_done(ctx: Context, snapshot: Any, answers: dict[str, Any]) -> Complete:
    record_effect(ctx, "permission")
    return Complete(result={"approved": answers["shell"].approved, "status": answers["shell"].status})


@step("t.fail")
def fails(ctx: Context, payload: Any) -> Fail:
    raise RuntimeError("the body broke")


@step("t.bad_next")
def bad_next(ctx: Context, payload: Any) -> Next:
    return Next("t.does_not_exist", payload={})


if os.environ.get("PARKWAY_TEST_WITH_V2") == "1":
    # Code that a later deploy removes: a step parked on it must fail closed, never guess.
    @continuation("t.one_done", version=2)
    def one_done_v2(ctx: Context, snapshot: Any, answers: dict[str, Any]) -> Complete:
        record_effect(ctx, "one_done_v2")
        return Complete(result={"v": 2})
