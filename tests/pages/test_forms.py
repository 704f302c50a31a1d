"""A question's JSON Schema as form fields, and a posted form back as the value (no I/O)."""

from __future__ import annotations

import pytest

from api.pages.forms import Field, FormError, fields_for, value_from
from tests.pages.flows import PLAN_SCHEMA


def widgets(field: Field) -> dict[str, str]:
    if field.widget == "group":
        return {k: v for child in field.children for k, v in widgets(child).items()}
    return {field.name: field.widget}


@pytest.mark.parametrize(
    ("schema", "widget"),
    [
        ({"type": "string", "enum": ["now", "tonight"]}, "select"),
        ({"enum": ["a", "b"]}, "select"),
        ({"type": "string"}, "text"),
        ({"type": "integer"}, "number"),
        ({"type": "number"}, "number"),
        ({"type": "boolean"}, "checkbox"),
        ({"type": "array", "items": {"type": "string"}}, "json"),
        ({"enum": [1, 2]}, "json"),
        ({"type": ["string", "null"]}, "json"),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, "json"),
        ({"type": "object"}, "json"),
        ({}, "json"),
    ],
)
def test_fields_for__each_schema_shape_gets_its_widget(schema: dict[str, object], widget: str) -> None:
    assert fields_for(schema).widget == widget


def test_fields_for__an_object_is_one_field_per_property_and_sensitive_ones_are_passwords() -> None:
    form = fields_for(PLAN_SCHEMA, ["otp"])
    assert widgets(form) == {
        "value.window": "select",
        "value.replicas": "number",
        "value.notify": "checkbox",
        "value.otp": "password",
        "value.labels": "json",
    }
    required = {child.name: child.required for child in form.children}
    assert required == {
        "value.window": True,
        "value.replicas": True,
        "value.notify": False,
        "value.otp": True,
        "value.labels": False,
    }
    notify = next(c for c in form.children if c.name == "value.notify")
    assert notify.label == "notify the on-call channel"  # a schema's title wins over the property name


def test_fields_for__sensitive_names_only_top_level_properties() -> None:
    schema = {"type": "object", "properties": {"inner": {"type": "object", "properties": {"otp": {"type": "string"}}}}}
    assert widgets(fields_for(schema, ["otp"])) == {"value.inner.otp": "text"}


def test_value_from__converts_each_field_and_leaves_out_empty_optional_ones() -> None:
    form = fields_for(PLAN_SCHEMA, ["otp"])
    posted = {"value.window": "tonight", "value.replicas": "3", "value.notify": "true", "value.otp": "123456"}
    assert value_from(form, {**posted, "value.labels": ""}) == {
        "window": "tonight",
        "replicas": 3,
        "notify": True,
        "otp": "123456",
    }
    unchecked = {k: v for k, v in posted.items() if k != "value.notify"}
    assert value_from(form, {**unchecked, "value.labels": '["a", "b"]'})["notify"] is False
    assert value_from(form, {**unchecked, "value.labels": '["a", "b"]'})["labels"] == ["a", "b"]


def test_value_from__keeps_unreadable_numbers_as_text_for_the_schema_to_refuse() -> None:
    assert value_from(fields_for({"type": "integer"}), {"value": "3"}) == 3
    assert value_from(fields_for({"type": "number"}), {"value": "2.5"}) == 2.5
    assert value_from(fields_for({"type": "number"}), {"value": "nan"}) == "nan"
    assert value_from(fields_for({"type": "integer"}), {"value": "three"}) == "three"


def test_value_from__a_json_field_that_does_not_parse_is_a_form_error() -> None:
    with pytest.raises(FormError, match="not valid JSON"):
        value_from(fields_for({"type": "array"}), {"value": "[1,"})
    assert value_from(fields_for({"type": "array"}), {"value": "[1, 2]"}) == [1, 2]


def test_value_from__a_required_scalar_is_always_present() -> None:
    assert value_from(fields_for({"type": "string"}), {}) == ""
    assert value_from(fields_for({"type": "boolean"}), {}) is False
