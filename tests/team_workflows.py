"""Workflows of the team tests (docs/teams.md), driven inline (tests/api) or by real workers
(tests/acceptance): each continuation returns what it saw of its wait, so a test reads the responses from
the run's result."""

from __future__ import annotations

from typing import Any

from tasks.sdk import Complete, Context, Park, Permission, Question, continuation, step

SECRET_SCHEMA = {
    "type": "object",
    "properties": {"note": {"type": "string"}, "pin": {"type": "string"}},
    "required": ["note", "pin"],
    "additionalProperties": False,
}


@step("teams.approve")
def approve(ctx: Context, payload: Any) -> Park:
    """A permission for ``payload``'s options (quorum, assignees, assignees_only, reject, ...)."""
    options = {k: payload[k] for k in ("quorum", "assignees", "assignees_only", "reject", "remind_after",
                                       "escalate", "expires_in", "justify") if k in payload}  # fmt: skip
    options["escalate"] = [tuple(level) for level in options.get("escalate", ())]
    ask = Permission(key="deploy", action="deploy", resources=["prod"], target=payload["target"], **options)
    return Park(continuation="teams.seen@1", interactions=[ask])


@step("teams.ask")
def ask(ctx: Context, payload: Any) -> Park:
    """A question needing ``payload["quorum"]`` responses, with a sensitive field."""
    question = Question(key="pin", prompt="Your note and pin?", schema=SECRET_SCHEMA, target=payload["target"],
                        sensitive=["pin"], quorum=payload["quorum"])  # fmt: skip
    return Park(continuation="teams.seen@1", interactions=[question])


@continuation("teams.seen", version=1)
def seen(ctx: Context, snapshot: Any, answers: dict[str, Any]) -> Complete:
    (answer,) = answers.values()
    return Complete(
        result={
            "status": answer.status,
            "approved": answer.approved,
            "answered_by": answer.answered_by,
            "responses": [
                {"principal": r.principal, "level": r.level, "pin_len": len(r.value.get("pin", "")),
                 "note": r.value.get("note"), "approved": r.value.get("approved")}
                for r in answer.responses
            ],
        }
    )  # fmt: skip
