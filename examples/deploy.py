"""The README's workflow: a permission and a question, then a side effect that must never run twice."""

from pydantic import BaseModel, Field

from parkway.settings import get_settings
from tasks.sdk import Complete, Next, Park, Permission, Question, continuation, step


class Deploy(BaseModel):
    service: str = Field(min_length=1, max_length=100)  # a start without it is refused: 422, nothing stored


@step("deploy.plan", payload=Deploy)
def plan(ctx, payload):
    cmd = f"deploy {payload.service}"
    return Park(continuation="deploy.decide@1", snapshot={"cmd": cmd}, interactions=[
        Permission(key="shell", action="shell.exec", resources=[cmd], target="example"),
        Question(key="window", prompt="When?", schema={"type": "string", "enum": ["now", "tonight"]},
                 target="example", expires_in=3600),
    ])  # fmt: skip


@continuation("deploy.decide", version=1)
def decide(ctx, snapshot, answers):
    if not answers["shell"].approved:
        return Complete(result={"skipped": True})
    return Next(execute, payload={"cmd": snapshot["cmd"], "window": answers["window"].value})


@step("deploy.execute")
def execute(ctx, payload):
    out = ctx.tool("shell", key="apply", args={"cmd": payload["cmd"]}, replay="never",
                   run=lambda: run_shell(ctx.run_id, payload["cmd"], payload["window"]))  # fmt: skip
    return Complete(result={"output": out})


def run_shell(run_id, cmd, window):
    """Stands in for a real deploy: appends the command to deploy.log in the run's workspace."""
    log = get_settings().workspace / run_id / "deploy.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        out.write(f"{cmd} ({window})\n")
    return f"ran {cmd!r} ({window}); see {log}"
