"""What a body may return: ``check_outcome`` refuses anything Parkway cannot commit, naming why."""

from __future__ import annotations

from typing import Any

import pytest

from parkway.errors import WorkflowError
from tasks.outcomes import Complete, Fail, Next, Park, Question, check_outcome
from tasks.sdk import Permission

REGISTERED = "t.finish@1"  # registered by tests.workflows (imported by tests/conftest.py)
WINDOW = Question(key="window", prompt="When?", schema={"type": "string"}, target="team:ops")


def _park(**changes: Any) -> Park:
    values: dict[str, Any] = {"continuation": REGISTERED, "snapshot": {"a": 1}, "interactions": [WINDOW]}
    values.update(changes)
    return Park(**values)


@pytest.mark.parametrize(
    ("outcome", "problem"),
    [
        pytest.param(_park(interactions=[]), r"at least one", id="no-interactions"),
        pytest.param(_park(interactions=[WINDOW, WINDOW]), r"'window'.*twice", id="duplicate-keys"),
        pytest.param(
            _park(interactions=[Question(key="q", prompt="?", schema={"type": "nope"}, target="team:ops")]),
            r"question q has an invalid JSON Schema",
            id="invalid-schema",
        ),
        pytest.param(_park(snapshot={"when": object()}), r"snapshot is not JSON-serializable", id="snapshot"),
        pytest.param(_park(continuation="t.finish"), r"name@version", id="no-version"),
        pytest.param(
            _park(interactions=[Question(key="", prompt="?", schema={}, target="team:ops")]),
            r"empty",
            id="empty-key",
        ),
        pytest.param(
            _park(interactions=[Question(key="q", prompt="?", schema={}, target="")]),
            r"q needs a target",
            id="no-target",
        ),
        pytest.param(
            _park(interactions=[Question(key="q", prompt="?", schema={}, target="t", expires_in=0)]),
            r"expires_in",
            id="expires-in-zero",
        ),
        pytest.param(
            _park(interactions=[Permission(key="p", action="shell.exec", resources=[], target="team:ops")]),
            r"permission p needs an action and at least one resource",
            id="permission-without-resources",
        ),
        pytest.param(_park(interactions=[{"key": "q"}]), r"must be Question or Permission", id="not-a-question"),
        pytest.param(Next("", payload={}), r"Next from .* must name a step", id="next-unnamed"),
        pytest.param(Next("t.after", payload={1, 2}), r"Next payload is not JSON", id="next-payload"),
        pytest.param(Complete(result=object()), r"Complete result is not JSON", id="complete-result"),
        pytest.param(Fail(""), r"needs an error text", id="fail-without-text"),
        pytest.param({"status": "done"}, r"returned dict; expected Park, Next, Complete or Fail", id="dict"),
        pytest.param(None, r"returned NoneType; expected Park", id="none"),
    ],
)
def test_check_outcome__refuses_with_a_sentence_naming_the_problem(outcome: Any, problem: str) -> None:
    with pytest.raises(WorkflowError, match=problem):
        check_outcome(outcome, "step t.test")


def test_check_outcome__names_where_a_non_outcome_came_from() -> None:
    with pytest.raises(WorkflowError, match=r"step t\.origin"):
        check_outcome(42, "step t.origin")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_check_outcome__refuses_a_snapshot_that_is_not_strict_json(bad: float) -> None:
    # NaN/Infinity are not JSON: PostgreSQL's json type refuses them at commit time, after the body ran
    with pytest.raises(WorkflowError, match="snapshot"):
        check_outcome(_park(snapshot={"score": bad}), "step t.test")


@pytest.mark.parametrize(
    "outcome",
    [
        _park(),
        _park(
            interactions=[
                WINDOW,
                Permission(key="shell", action="shell.exec", resources=["ls", "ls"], target="team:ops"),
            ]
        ),
        Next("t.after", payload={"x": [1, 2]}),
        Complete(),
        Complete(result={"ok": True}),
        Fail("nope", details={"code": 3}),
    ],
)
def test_check_outcome__accepts_valid_outcomes_unchanged(outcome: Any) -> None:
    assert check_outcome(outcome, "step t.test") is outcome


def _ask(**changes: Any) -> Park:
    values: dict[str, Any] = {"key": "q", "prompt": "?", "schema": {"type": "string"}, "target": "team:ops"}
    values.update(changes)
    return _park(interactions=[Question(**values)])


@pytest.mark.parametrize(
    ("outcome", "problem"),
    [
        pytest.param(_ask(expires_in=float("nan")), r"expires_in .* not nan", id="expires-in-nan"),
        pytest.param(_ask(expires_in=float("inf")), r"expires_in .* not inf", id="expires-in-inf"),
        pytest.param(_ask(expires_in=-5), r"expires_in must be positive", id="expires-in-negative"),
        pytest.param(_ask(expires_in=367 * 86400), r"at most 31622400 \(366 days\)", id="expires-in-367-days"),
        pytest.param(_ask(expires_in="60"), r"expires_in must be a number", id="expires-in-text"),
        pytest.param(_ask(schema=True), r"needs a JSON Schema object", id="schema-not-an-object"),
        pytest.param(_ask(schema={"minLength": float("nan")}), r"schema of question q is not JSON", id="schema-nan"),
        pytest.param(_ask(target="team:\x00ops"), r"target of interaction q contains a NUL", id="target-nul"),
        pytest.param(_ask(key="q" * 201), r"longer than 200", id="key-too-long"),
        pytest.param(
            _park(snapshot={"s": "\ud800"}), r"snapshot .*\$\.s: contains a lone surrogate", id="snapshot-sur"
        ),
        pytest.param(Complete(result=["a\x00"]), r"result .*\$\[0\]: contains a NUL", id="result-nul"),
        pytest.param(Next("t.after", payload={"x": float("-inf")}), r"Next payload .*\$\.x", id="payload-inf"),
        pytest.param(Fail("broke\x00"), r"error text of Fail .* NUL", id="fail-text-nul"),
    ],
)
def test_check_outcome__refuses_what_the_store_could_not_commit(outcome: Any, problem: str) -> None:
    with pytest.raises(WorkflowError, match=problem):
        check_outcome(outcome, "step t.test")


def test_check_outcome__a_park_on_a_version_this_process_lacks_is_not_judged_here() -> None:
    # Another worker of the fleet may run it (the worker asks the fleet); a malformed Park is still a Fail
    park = _park(continuation="t.nowhere@1")
    assert check_outcome(park, "step t.test") is park
    with pytest.raises(WorkflowError, match="snapshot"):
        check_outcome(_park(continuation="t.nowhere@1", snapshot={"x": float("nan")}), "step t.test")
