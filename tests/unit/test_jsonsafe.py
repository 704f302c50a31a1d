"""``json_problem``: the one rule for what Parkway stores as JSON (the API's bodies, the bodies' outcomes)."""

from __future__ import annotations

from typing import Any

import pytest

from models.jsonsafe import MAX_DEPTH, json_problem, storable_text


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -(10**30), 1.5, "", "héllo 🙂", [], {}, ("a", 1), {"a": [1, {"b": None}]}, _nested(MAX_DEPTH)],
)
def test_json_problem__none_for_storable_values(value: Any) -> None:
    assert json_problem(value) is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (float("nan"), "$: nan is not a JSON number"),
        ({"a": [0, float("inf")]}, "$.a[1]: inf is not a JSON number"),
        ({"x": "a\x00b"}, "$.x: contains a NUL character"),
        (["\ud800"], "$[0]: contains a lone surrogate (no UTF-8 form)"),
        ({"\x00": 1}, "$: a key contains a NUL character"),
        ({1: "a"}, "$: a key of type int (JSON object keys are strings)"),
        ({"a b": {1, 2}}, "$.'a b': a set is not a JSON value"),
        (_nested(MAX_DEPTH + 1), f"$[0]{'[0]' * (MAX_DEPTH - 1)}: nested deeper than {MAX_DEPTH} levels"),
    ],
)
def test_json_problem__names_the_first_problem_and_where(value: Any, problem: str) -> None:
    assert json_problem(value) == problem


def test_json_problem__never_quotes_the_value_and_survives_any_depth() -> None:
    assert "s3cret" not in (json_problem({"otp": "s3cret\x00"}) or "")
    assert json_problem(_nested(100_000)) is not None  # no RecursionError


def test_storable_text__replaces_only_what_cannot_be_stored() -> None:
    assert storable_text("ok 🙂") == "ok 🙂"
    assert storable_text("a\x00b\ud800c") == "a\ufffdb\ufffdc"
