"""The workflow ``parkway demo`` runs: its worker and API import this module through ``PARKWAY_IMPORTS``.

``demo.deploy`` parks on a Permission and a Question. Its continuation ``demo.decide@1`` runs the deploy
through ``ctx.tool(..., replay="never")`` (a side effect outside the step's commit, journaled so a
re-executed body replays its outcome instead of running it again) and records the deployment inside the
commit with ``ctx.in_commit`` (so it exists exactly when the continuation committed). Both write a row to
``parkway_demo_effects``, which the demo counts.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from tasks.sdk import Complete, Context, Park, Permission, Question, continuation, step

TARGET = "team:ops"
EFFECTS_TABLE = "parkway_demo_effects"
EFFECTS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {EFFECTS_TABLE} "
    "(run_id VARCHAR(64) NOT NULL, kind VARCHAR(32) NOT NULL, detail VARCHAR(200) NOT NULL)"
)
TOOL, COMMITTED = "tool", "committed"


def write_effect(session: Any, run_id: str, kind: str, detail: str) -> None:
    session.execute(
        text(f"INSERT INTO {EFFECTS_TABLE} (run_id, kind, detail) VALUES (:r, :k, :d)"),
        {"r": run_id, "k": kind, "d": detail},
    )


def run_deploy(run_id: str, cmd: str) -> str:
    """The side effect: committed the moment it happens, whatever becomes of the step afterwards."""
    from parkway.db import transaction

    with transaction() as session:
        write_effect(session, run_id, TOOL, cmd)
    return f"{cmd}: ok"


@step("demo.deploy")
def plan(ctx: Context, payload: dict[str, Any]) -> Park:
    service = str(payload.get("service", "billing"))
    cmd = f"deploy {service}"
    return Park(
        continuation="demo.decide@1",
        snapshot={"service": service, "cmd": cmd},
        interactions=[
            Permission(key="shell", action="shell.exec", resources=[cmd], target=TARGET),
            Question(
                key="window",
                prompt=f"When should {service} be deployed?",
                schema={"type": "string", "enum": ["now", "tonight"]},
                target=TARGET,
            ),
        ],
    )


@continuation("demo.decide", version=1)
def decide(ctx: Context, snapshot: dict[str, Any], answers: dict[str, Any]) -> Complete:
    if not answers["shell"].approved:
        return Complete(result={"deployed": False, "reason": "permission rejected"})
    cmd = snapshot["cmd"]
    output = ctx.tool("shell", key="deploy", args={"cmd": cmd}, replay="never", run=lambda: run_deploy(ctx.run_id, cmd))
    window = answers["window"].value

    def record(session: Any) -> None:
        write_effect(session, ctx.run_id, COMMITTED, f"{cmd} ({window})")

    ctx.in_commit(record)
    return Complete(result={"deployed": True, "window": window, "output": output, "attempt": ctx.attempt})
