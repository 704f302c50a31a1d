"""Workflows of the Decisions page tests (imported by the API and worker subprocesses through
PARKWAY_IMPORTS=tests.workflows,tests.pages.flows,tests.team_workflows, and by the test process through
conftest)."""

from __future__ import annotations

import re
from typing import Any

from tasks.sdk import Complete, Context, Next, Park, Permission, Question, continuation, step

IMPORTS = "tests.workflows,tests.pages.flows,tests.team_workflows"

PLAN_SCHEMA = {
    "type": "object",
    "properties": {
        "window": {"type": "string", "enum": ["now", "tonight"], "description": "when the deploy may start"},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 20},
        "notify": {"type": "boolean", "title": "notify the on-call channel"},
        "otp": {"type": "string", "pattern": "^[0-9]{6}$", "description": "the 6-digit code of your authenticator"},
        "labels": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["window", "replicas", "otp"],
    "additionalProperties": False,
}


@step("pages.deploy")
def deploy(ctx: Context, payload: dict[str, Any]) -> Park:
    """A permission and a question whose answer is an object with a sensitive field."""
    service = payload["service"]
    return Park(
        continuation="pages.deploy_done@1",
        snapshot={"service": service},
        interactions=[
            Permission(key="shell", action="shell.exec", resources=[f"deploy {service}"], target="team:ops"),
            Question(
                key="plan",
                prompt=f"How should {service} be deployed?",
                schema=PLAN_SCHEMA,
                target="team:ops",
                sensitive=["otp"],
            ),
        ],
    )


@continuation("pages.deploy_done", version=1)
def deploy_done(ctx: Context, snapshot: dict[str, Any], answers: dict[str, Any]) -> Complete:
    plan = answers["plan"].value or {}
    return Complete(
        result={
            "service": snapshot["service"],
            "approved": answers["shell"].approved,
            "window": plan.get("window"),
            "replicas": plan.get("replicas"),
            "notify": plan.get("notify"),
            "labels": plan.get("labels"),
            "otp_ok": bool(re.fullmatch(r"[0-9]{6}", str(plan.get("otp")))),  # the code itself never leaves
            "by": answers["plan"].answered_by,
        }
    )


@step("pages.ask")
def ask(ctx: Context, payload: dict[str, Any]) -> Park:
    """One question whose prompt, schema and expiry come from the payload."""
    return Park(
        continuation="pages.ask_done@1",
        interactions=[
            Question(
                key="q",
                prompt=payload.get("prompt", "Go?"),
                schema=payload.get("schema", {"type": "string"}),
                target=payload.get("target", "team:ops"),
                expires_in=payload.get("expires_in"),
            )
        ],
    )


@continuation("pages.ask_done", version=1)
def ask_done(ctx: Context, snapshot: Any, answers: dict[str, Any]) -> Complete:
    return Complete(result={"status": answers["q"].status, "value": answers["q"].value})


RELEASE_SCHEMA = {
    "type": "object",
    "properties": {"channel": {"type": "string", "enum": ["stable", "beta"]}, "otp": {"type": "string"}},
    "required": ["channel", "otp"],
    "additionalProperties": False,
}


@step("pages.release")
def release(ctx: Context, payload: dict[str, Any]) -> Park:
    """A question with a sensitive field; once answered, a next step with a tool call and a review."""
    prompt = f"Release {payload['service']} to which channel?"
    release = Question(key="release", prompt=prompt, schema=RELEASE_SCHEMA, target="team:ops", sensitive=["otp"])
    return Park(continuation="pages.release_decided@1", snapshot=payload, interactions=[release])


@continuation("pages.release_decided", version=1)
def release_decided(ctx: Context, snapshot: dict[str, Any], answers: dict[str, Any]) -> Next:
    return Next(
        "pages.release_apply", payload={"service": snapshot["service"], "channel": answers["release"].value["channel"]}
    )


@step("pages.release_apply")
def release_apply(ctx: Context, payload: dict[str, Any]) -> Complete:
    out = ctx.tool(
        "publish", key="publish", args=payload, replay="never", run=lambda: f"published {payload['service']}"
    )
    review_id = ctx.start_review("release-check")
    ctx.record_review(review_id, "clean", 3, 2)
    return Complete(result={"out": out, "channel": payload["channel"]})


ORDERED_KEYS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


@step("pages.ordered")
def ordered(ctx: Context, payload: dict[str, Any]) -> Park:
    """Eight questions, declared in this order (their ids, hashes, sort in another); titled when asked to."""
    if payload.get("title"):
        ctx.set_title(payload["title"])
    questions = [Question(key=k, prompt=f"The {k} question", schema={"type": "string"}, target="team:ops")
                 for k in ORDERED_KEYS]  # fmt: skip
    return Park(continuation="pages.deploy_done@1", snapshot={"service": "x"}, interactions=questions)
