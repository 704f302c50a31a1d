"""A step or continuation referenced by its decorated function (``Next(execute)``, ``Park(continuation=decide)``):
``check_outcome`` turns it into the key the decorator registered, and refuses a function that names none."""

from __future__ import annotations

from typing import Any

import pytest

from parkway.errors import WorkflowError
from tasks import registry
from tasks.outcomes import Next, Park, Question, check_outcome
from tasks.sdk import continuation, step

WINDOW = Question(key="window", prompt="When?", schema={"type": "string"}, target="team:ops")


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test vanish after it."""
    monkeypatch.setattr(registry, "_steps", dict(registry._steps))
    monkeypatch.setattr(registry, "_continuations", dict(registry._continuations))


def test_park__a_decorated_continuation_names_its_name_at_version() -> None:
    @continuation("r.decide", version=3)
    def decide(ctx: Any, snapshot: Any, answers: Any) -> None: ...

    checked = check_outcome(Park(continuation=decide, snapshot={}, interactions=[WINDOW]), "step r.plan")  # type: ignore[arg-type]
    assert isinstance(checked, Park) and checked.continuation == "r.decide@3"


def test_next__a_decorated_step_names_its_step() -> None:
    @step("r.execute")
    def execute(ctx: Any, payload: Any) -> None: ...

    checked = check_outcome(Next(execute, payload={"a": 1}), "continuation r.decide@1")  # type: ignore[arg-type]
    assert checked == Next("r.execute", payload={"a": 1})


def test_references__a_function_not_decorated_as_that_kind_is_refused_naming_it() -> None:
    @step("r.only_a_step")
    def only_a_step(ctx: Any, payload: Any) -> None: ...

    def plain(ctx: Any, payload: Any) -> None: ...

    with pytest.raises(WorkflowError, match=r"Park from step r\.plan names .*only_a_step, which is not decorated "
                                            r"with @continuation"):  # fmt: skip
        check_outcome(Park(continuation=only_a_step, interactions=[WINDOW]), "step r.plan")  # type: ignore[arg-type]
    with pytest.raises(WorkflowError, match=r"Next from step r\.plan names .*plain, which is not decorated with @step"):
        check_outcome(Next(plain), "step r.plan")  # type: ignore[arg-type]


def test_references__a_function_registered_as_two_versions_must_be_named_as_a_string() -> None:
    @continuation("r.twice", version=2)
    @continuation("r.twice", version=1)
    def twice(ctx: Any, snapshot: Any, answers: Any) -> None: ...

    with pytest.raises(WorkflowError, match=r"registered as r\.twice@1 and r\.twice@2: name the one meant"):
        check_outcome(Park(continuation=twice, interactions=[WINDOW]), "step r.plan")  # type: ignore[arg-type]
    named = check_outcome(Park(continuation="r.twice@2", interactions=[WINDOW]), "step r.plan")
    assert isinstance(named, Park) and named.continuation == "r.twice@2"
