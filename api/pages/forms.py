"""A question's JSON Schema as HTML form fields, and a posted form back as the answer's value.

The mapping is deliberately small: a string with an ``enum`` of strings is a select; a string a text input
(a password input for a field the question marks ``sensitive``); an integer or number a number input; a
boolean a checkbox; an object with ``properties`` one field per property (recursively). Anything else
(arrays, ``oneOf``, a list of types …) is a JSON textarea. The value built from a form is validated by the
SDK against the schema like any other answer, so a wrong input is a readable 422, never a guess.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from api.pages import texts
from models.jsonsafe import json_problem

Widget = Literal["select", "text", "password", "number", "checkbox", "json", "group"]

ROOT = "value"
OMIT: Any = object()  # an optional property left empty: not in the value at all


class FormError(ValueError):
    """Raised when a posted field cannot be read as what its schema asks (e.g. JSON that does not parse)."""


@dataclass
class Field:
    """One input of an answer form (or a group of them, for an object)."""

    name: str  # the form field's name: "value" or "value.<property>…"
    label: str
    widget: Widget
    kind: str = "string"  # how the posted text becomes a value: string, integer, number, boolean, json, object
    required: bool = True
    help: str | None = None
    options: list[str] = field(default_factory=list)
    children: list[Field] = field(default_factory=list)


def fields_for(schema: Any, sensitive: Sequence[str] = ()) -> Field:
    """The form for a question's answer: the root field named ``value``."""
    return _field(schema, name=ROOT, label="Answer", required=True, secret=False, sensitive=list(sensitive))


def _field(schema: Any, *, name: str, label: str, required: bool, secret: bool, sensitive: list[str]) -> Field:
    if not isinstance(schema, dict):
        return Field(name, label, "json", kind="json", required=required)
    label = str(schema.get("title") or label)
    help_ = schema.get("description") if isinstance(schema.get("description"), str) else None
    kind = schema.get("type")
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum) and kind in (None, "string"):
        return Field(name, label, "select", required=required, help=help_, options=list(enum))
    if kind == "string":
        return Field(name, label, "password" if secret else "text", required=required, help=help_)
    if kind in ("integer", "number"):
        widget: Widget = "password" if secret else "number"
        return Field(name, label, widget, kind=kind, required=required, help=help_)
    if kind == "boolean":
        return Field(name, label, "checkbox", kind="boolean", required=required, help=help_)
    properties = schema.get("properties")
    if kind == "object" and isinstance(properties, dict) and properties:
        listed = schema.get("required")
        needed = listed if isinstance(listed, list) else []
        top = name == ROOT
        children = [
            _field(
                sub,
                name=f"{name}.{prop}",
                label=str(prop),
                required=prop in needed,
                # ``sensitive`` names top-level properties of an object value.
                secret=top and prop in sensitive,
                sensitive=sensitive,
            )
            for prop, sub in properties.items()
        ]
        return Field(name, label, "group", kind="object", required=required, help=help_, children=children)
    return Field(name, label, "json", kind="json", required=required, help=help_)


def value_from(root: Field, form: Mapping[str, str]) -> Any:
    """The answer's value from a posted form; raises ``FormError`` for a field that cannot be read, or for
    what Parkway cannot store (NUL, a lone surrogate, ``NaN`` in a JSON field: ``models.jsonsafe``)."""
    value = _value(root, form)
    value = None if value is OMIT else value
    problem = json_problem(value)
    if problem is not None:
        raise FormError(texts.NOT_STORABLE.format(problem=problem))
    return value


def _value(spec: Field, form: Mapping[str, str]) -> Any:
    if spec.kind == "object":
        built = {}
        for child in spec.children:
            got = _value(child, form)
            if got is not OMIT:
                built[child.name.rsplit(".", 1)[1]] = got
        return built if built or spec.required else OMIT
    if spec.kind == "boolean":
        return spec.name in form  # an unchecked box is not posted
    raw = form.get(spec.name, "")
    if raw.strip() == "" and not spec.required:
        return OMIT
    if spec.kind in ("integer", "number"):
        return _number(raw.strip())
    if spec.kind == "json":
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise FormError(texts.NOT_JSON.format(label=spec.label, problem=exc)) from None
    return raw


def _number(raw: str) -> Any:
    """An int or a float; text that is neither is kept as text so the schema says what is wrong."""
    try:
        return int(raw)
    except ValueError:
        pass
    try:
        number = float(raw)
    except ValueError:
        return raw
    return number if math.isfinite(number) else raw
