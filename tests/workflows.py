"""Workflows the tests run in real worker processes (imported through PARKWAY_IMPORTS)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text

from tasks.sdk import (
    Complete,
    Context,
    Fail,
    Next,
    Park,
    Permission,
    PermissionRejected,
    PossiblyRan,
    Question,
    continuation,
    step,
)


def needs(**properties: Any) -> dict[str, Any]:
    """A payload's JSON Schema: an object with these properties, each required (``@step(name, payload=...)``)."""
    return {"type": "object", "properties": properties, "required": list(properties)}


TEXT: dict[str, Any] = {"type": "string"}
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


@continuation("t.slow_done", version=1)
def slow_done(ctx: Context, snapshot: dict[str, Any], answers: dict[str, Any]) -> Complete:
    """Says it runs (a file beside the flag: no database write, no tool call), then on its first attempt
    waits for the flag file; completes with the attempt it ran as."""
    Path(f"{snapshot['flag']}.running").touch()
    wait_for_flag(snapshot, "flag", ctx)
    record_effect(ctx, "slow_done")
    return Complete(result={"go": answers["go"].value, "attempt": ctx.attempt})


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


@step("t.permission", payload=needs(cmd=TEXT))
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
    # Computed at run time, so `parkway check` (and a worker's start) cannot see it: the returned outcome is
    # judged when the body returns it.
    return Next(payload.get("step", "t.does_not_exist"), payload={})


if os.environ.get("PARKWAY_TEST_WITH_V2") == "1":
    # Code that a later deploy removes: a step parked on it must fail closed, never guess.
    @continuation("t.one_done", version=2)
    def one_done_v2(ctx: Context, snapshot: Any, answers: dict[str, Any]) -> Complete:
        record_effect(ctx, "one_done_v2")
        return Complete(result={"v": 2})


def tool_effect(run_id: str, tag: str) -> str:
    """A side effect outside any Parkway transaction: committed the moment it happens."""
    from parkway.db import transaction

    with transaction() as session:
        session.execute(text("INSERT INTO test_effects (run_id, tag) VALUES (:r, :t)"), {"r": run_id, "t": tag})
    return f"did {tag}"


def wait_for_flag(payload: dict[str, Any], name: str, ctx: Context) -> None:
    flag = payload.get(name)
    if flag and ctx.attempt == 1:
        deadline = time.monotonic() + 60
        while not Path(flag).exists() and time.monotonic() < deadline:
            time.sleep(0.05)


@step("t.tool")
def one_tool(ctx: Context, payload: dict[str, Any]) -> Complete:
    """One tool call; catches PossiblyRan so the test can see the step learned it."""
    try:
        out = ctx.tool(
            "effect",
            key="apply",
            args={"cmd": payload.get("cmd", "x")},
            replay=payload.get("replay", "never"),
            run=lambda: tool_effect(ctx.run_id, "tool"),
        )
    except PossiblyRan as exc:
        return Complete(result={"possibly_ran": str(exc)})
    return Complete(result={"out": out})


@step("t.three_tools")
def three_tools(ctx: Context, payload: dict[str, Any]) -> Complete:
    outs = [ctx.tool("effect", key="one", args={}, replay="never", run=lambda: tool_effect(ctx.run_id, "one"))]
    outs.append(ctx.tool("effect", key="two", args={}, replay="never", run=lambda: tool_effect(ctx.run_id, "two")))
    wait_for_flag(payload, "wait_for", ctx)
    outs.append(ctx.tool("effect", key="three", args={}, replay="never", run=lambda: tool_effect(ctx.run_id, "three")))
    return Complete(result={"outs": outs})


@step("t.stuck_tool")
def stuck_tool(ctx: Context, payload: dict[str, Any]) -> Complete:
    """Two never tools; on the first attempt the first one's effect waits for the flag file ``wait_for``."""

    def first() -> str:
        wait_for_flag(payload, "wait_for", ctx)
        return tool_effect(ctx.run_id, "first")

    def second() -> str:
        return tool_effect(ctx.run_id, "second")

    outs = [ctx.tool("effect", key="first", args={}, replay="never", run=first)]
    outs.append(ctx.tool("effect", key="second", args={}, replay="never", run=second))
    return Complete(result={"outs": outs})


@step("t.guarded", payload=needs(cmd=TEXT, resources={"type": "array", "items": TEXT}))
def guarded(ctx: Context, payload: dict[str, Any]) -> Complete:
    """A tool behind a permission preflight for a resource set given by the payload (or a file)."""
    resources = payload["resources"]
    if payload.get("resources_file") and Path(payload["resources_file"]).exists():
        resources = Path(payload["resources_file"]).read_text().split(",")
    try:
        out = ctx.tool(
            "shell",
            key="apply",
            args={"cmd": payload["cmd"]},
            replay="never",
            run=lambda: tool_effect(ctx.run_id, "guarded"),
            permissions=[Permission(key="p", action="shell.exec", resources=resources, target="team:ops")],
        )
    except PermissionRejected as exc:
        return Complete(result={"rejected": str(exc)})
    return Complete(result={"out": out})


@step("t.args_change")
def args_change(ctx: Context, payload: dict[str, Any]) -> Complete:
    """The same tool key with arguments that differ between executions."""
    ctx.tool("effect", key="apply", args={"attempt": ctx.attempt}, replay="never",
             run=lambda: tool_effect(ctx.run_id, "args"))  # fmt: skip
    wait_for_flag(payload, "wait_for", ctx)
    return Complete(result={})


def _malformed_question(**changes: Any) -> Park:
    values: dict[str, Any] = {"key": "go", "prompt": "Go?", "schema": {"type": "string"}, "target": "team:ops"}
    values.update(changes)
    return Park(continuation="t.one_done@1", snapshot={}, interactions=[Question(**values)])


def _malformed_snapshot(snapshot: Any) -> Park:
    return Park(continuation="t.one_done@1", snapshot=snapshot, interactions=_malformed_question().interactions)


def _raise(exc: Exception) -> Any:
    raise exc


# Outcomes the store could not commit, by name (a run payload is JSON, so the body builds them).
MALFORMED: dict[str, Any] = {
    "expires-nan": lambda: _malformed_question(expires_in=float("nan")),
    "expires-inf": lambda: _malformed_question(expires_in=float("inf")),
    "expires-negative": lambda: _malformed_question(expires_in=-30),
    "expires-367-days": lambda: _malformed_question(expires_in=367 * 24 * 3600),
    "schema-invalid": lambda: _malformed_question(schema={"type": "nope"}),
    "schema-not-object": lambda: _malformed_question(schema=["string"]),
    "target-nul": lambda: _malformed_question(target="team:\x00ops"),
    "snapshot-object": lambda: _malformed_snapshot({"at": object()}),
    "snapshot-nan": lambda: _malformed_snapshot([float("nan")]),
    "result-nul": lambda: Complete(result={"text": "a\x00b"}),
    "result-surrogate": lambda: Complete(result={"text": "\ud800"}),
    "result-inf": lambda: Complete(result={"score": float("inf")}),
    "next-payload-nul": lambda: Next("t.after", payload={"text": "\x00"}),
    "fail-details-nan": lambda: Fail("it broke", details={"score": float("nan")}),
    "raise-nul": lambda: _raise(RuntimeError("bad \x00 byte")),
}


@step("t.malformed", payload=needs(kind={"enum": sorted(MALFORMED)}))
def malformed(ctx: Context, payload: dict[str, Any]) -> Any:
    """Returns (or raises) the malformed outcome the payload names."""
    record_effect(ctx, "malformed")  # in the commit: must never happen for a refused outcome
    return MALFORMED[payload["kind"]]()


@step("t.outcome", payload=needs(outcome=TEXT))
def outcome(ctx: Context, payload: dict[str, Any]) -> Complete | Next | Park:
    """Returns the outcome its payload names, with no ``in_commit`` callback: its commit takes the statement
    production takes (autocommit for ``Complete`` and ``Next``)."""
    if payload["outcome"] == "Complete":
        return Complete(result={"done": True})
    if payload["outcome"] == "Next":
        return Next("t.after", payload={})
    return _malformed_question()  # unchanged, a well-formed Park on t.one_done@1


@step("t.fail_details")
def fail_details(ctx: Context, payload: dict[str, Any]) -> Fail:
    return Fail("the check broke", details={"code": 3, "checked": payload.get("checked", [])})


@step("t.to_remote", payload=needs(to=TEXT))
def to_remote(ctx: Context, payload: dict[str, Any]) -> Next:
    """Hands over to a step only a remote worker serves (tests/acceptance/test_worker_protocol.py)."""
    return Next(payload["to"], payload={"from": "python"})


@step("t.gated", payload=needs(flag=TEXT))
def gated(ctx: Context, payload: dict[str, Any]) -> Complete:
    """Says it runs (a file beside the flag), then on its first attempt waits for the flag file; completes
    (tests/acceptance/test_executor.py: a fault injected while it runs)."""
    Path(f"{payload['flag']}.running").touch()
    wait_for_flag(payload, "flag", ctx)
    return Complete(result={"attempt": ctx.attempt})
