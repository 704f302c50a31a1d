"""The continuation registry: ``name@version`` keys, integer versions, no silent replacement."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tasks import registry
from tasks.sdk import continuation, step


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test vanish after it."""
    monkeypatch.setattr(registry, "_steps", dict(registry._steps))
    monkeypatch.setattr(registry, "_continuations", dict(registry._continuations))


def _fn(name: str, module: str = __name__) -> Callable[..., Any]:
    def body(ctx: Any, *args: Any) -> None:
        return None

    body.__name__ = body.__qualname__ = name
    body.__module__ = module
    return body


@pytest.mark.parametrize("version", [0, -1, "1", 1.0, None])
def test_continuation__version_must_be_an_integer_of_at_least_one(version: Any) -> None:
    with pytest.raises(ValueError, match="version"):
        continuation("u.bad", version=version)(_fn("bad"))
    assert not any(k.startswith("u.bad@") for k in registry._continuations)


def test_continuation__name_may_not_carry_its_own_version() -> None:
    with pytest.raises(ValueError):
        continuation("u.named@1", version=1)(_fn("named"))


def test_continuation__registers_under_name_at_version() -> None:
    fn = continuation("u.ok", version=3)(_fn("ok"))
    assert registry.has_continuation("u.ok@3")
    assert not registry.has_continuation("u.ok@1")
    assert registry.continuation_body("u.ok@3") is fn


def test_continuation__versions_of_one_name_coexist() -> None:
    one = continuation("u.multi", version=1)(_fn("multi_v1"))
    two = continuation("u.multi", version=2)(_fn("multi_v2"))
    assert registry.continuation_body("u.multi@1") is one
    assert registry.continuation_body("u.multi@2") is two


def test_continuation__registering_the_same_function_again_is_allowed() -> None:
    fn = _fn("again")
    continuation("u.again", version=1)(fn)
    continuation("u.again", version=1)(fn)
    assert registry.continuation_body("u.again@1") is fn


def test_continuation__a_different_function_under_the_same_key_raises() -> None:
    first = continuation("u.taken", version=1)(_fn("first"))
    with pytest.raises(ValueError, match="already registered"):
        continuation("u.taken", version=1)(_fn("second"))
    assert registry.continuation_body("u.taken@1") is first


def test_continuation__same_named_function_from_another_module_under_the_same_key_raises() -> None:
    # Two workflow modules both defining `decide` for "deploy.decide@1" must not silently replace each other
    first = continuation("u.clash", version=1)(_fn("decide", module="team_a.workflows"))
    with pytest.raises(ValueError, match="already registered"):
        continuation("u.clash", version=1)(_fn("decide", module="team_b.workflows"))
    assert registry.continuation_body("u.clash@1") is first


def test_step__a_different_function_under_the_same_name_raises() -> None:
    first = step("u.step")(_fn("step_one"))
    with pytest.raises(ValueError, match="already registered"):
        step("u.step")(_fn("step_two"))
    assert registry.step_body("u.step") is first


def test_lookup__unknown_names_raise_not_registered() -> None:
    from parkway.errors import NotRegistered

    with pytest.raises(NotRegistered):
        registry.continuation_body("u.none@1")
    with pytest.raises(NotRegistered):
        registry.step_body("u.none")
