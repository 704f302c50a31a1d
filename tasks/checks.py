"""Checks of the parts of a body's outcome the store keeps in columns: each raises ``WorkflowError`` with a
sentence naming the problem, before anything commits (the body's outcome is then its own ``Fail``)."""

from __future__ import annotations

import math
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from models.jsonsafe import json_problem, text_problem
from parkway.errors import WorkflowError

MAX_EXPIRES_IN_S = 366 * 24 * 3600  # a wait longer than a year is a unit mistake, not a plan


def text_ok(value: Any, what: str, *, max_len: int | None = 200) -> None:
    """A name or text the store keeps in a column: a non-empty string it can hold."""
    if not isinstance(value, str) or not value:
        raise WorkflowError(f"{what} must be a non-empty string")
    problem = text_problem(value)
    if problem is not None:
        raise WorkflowError(f"{what} {problem}")
    if max_len is not None and len(value) > max_len:
        raise WorkflowError(f"{what} is longer than {max_len} characters")


def expires_in_ok(key: str, seconds: Any) -> None:
    """``None`` (no expiry) or a finite number of seconds in (0, 366 days]."""
    if seconds is None:
        return
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise WorkflowError(f"interaction {key}: expires_in must be a number of seconds")
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_EXPIRES_IN_S:
        raise WorkflowError(
            f"interaction {key}: expires_in must be positive seconds, at most {MAX_EXPIRES_IN_S} (366 days),"
            f" not {seconds!r}"
        )


def schema_ok(key: str, schema: Any) -> None:
    """A JSON Schema object the store can hold and ``jsonschema`` accepts (``check_schema``)."""
    if not isinstance(schema, dict):
        raise WorkflowError(f"question {key} needs a JSON Schema object, not {type(schema).__name__}")
    problem = json_problem(schema)
    if problem is not None:
        raise WorkflowError(f"the schema of question {key} is not JSON-serializable ({problem})")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise WorkflowError(f"question {key} has an invalid JSON Schema: {exc.message}") from None
    except Exception as exc:  # a schema the checker cannot even walk
        raise WorkflowError(f"question {key} has an invalid JSON Schema ({type(exc).__name__})") from None
