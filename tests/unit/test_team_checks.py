"""A wait's team options (docs/teams.md) are checked before anything commits: a sentence naming the problem."""

from __future__ import annotations

from typing import Any

import pytest

from parkway.errors import WorkflowError
from tasks.outcomes import Question, interaction_specs
from tasks.sdk import Permission


def _ask(**options: Any) -> Permission:
    return Permission(key="deploy", action="deploy", resources=["prod"], target="team:ops", **options)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        pytest.param({"quorum": 0}, r"quorum must be a whole number", id="quorum-0"),
        pytest.param({"quorum": True}, r"quorum must be a whole number", id="quorum-bool"),
        pytest.param({"assignees_only": True}, r"assignees_only needs assignees", id="only-without-names"),
        pytest.param({"assignees": ["ana", "ana"]}, r"names a principal twice", id="assignee-twice"),
        pytest.param({"assignees": "ana"}, r"list of principal names", id="assignees-a-string"),
        pytest.param({"quorum": 3, "assignees": ["ana", "bo"], "assignees_only": True},
                     r"quorum 3 is more than the 2 principals who could ever answer", id="quorum-unreachable"),
        pytest.param({"remind_after": [60, 30]}, r"remind_after must be increasing", id="reminders-unordered"),
        pytest.param({"remind_after": [-1]}, r"positive seconds", id="reminder-negative"),
        pytest.param({"escalate": [(600, "team:leads")], "expires_in": 300}, r"comes after its expiry",
                     id="escalation-after-expiry"),
        pytest.param({"escalate": [(600, "team:leads"), (300, "team:cto")]}, r"increasing order",
                     id="escalation-unordered"),
        pytest.param({"escalate": [(600,)]}, r"pair \(after_seconds, target\)", id="escalation-not-a-pair"),
        pytest.param({"reject": "never"}, r"reject must be one of first, unreachable", id="reject-unknown"),
    ],
)  # fmt: skip
def test_team_options__refused_with_a_sentence(options: dict[str, Any], problem: str) -> None:
    with pytest.raises(WorkflowError, match=problem):
        interaction_specs([_ask(**options)])


def test_team_options__a_question_has_no_reject_policy() -> None:
    question = Question(key="q", prompt="?", schema={}, target="team:ops", quorum=2)
    assert interaction_specs([question])[0].quorum == 2
    with pytest.raises(WorkflowError, match="reject must be one of"):
        object.__setattr__(question, "reject", "unreachable")
        interaction_specs([question])


def test_team_options__none_used_keeps_the_wait_as_before() -> None:
    (spec,) = interaction_specs([_ask()])
    assert (spec.quorum, spec.team()) == (1, None)
    (spec,) = interaction_specs([_ask(quorum=2, assignees=["ana"], escalate=[(60, ["bo"])], expires_in=120)])
    assert spec.team() == {"assignees": ["ana"], "assignees_only": False, "reject": "first", "remind_after": [],
                           "escalate": [{"after": 60.0, "to": ["bo"]}]}  # fmt: skip
