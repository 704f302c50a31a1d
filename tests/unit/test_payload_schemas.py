"""A step's declared payload (``tasks.payloads``) and the rules the OpenAPI says of every request
(``api.schema_rules``), without I/O."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, SecretStr, field_validator

from api import schema_rules
from parkway.errors import InvalidPayload
from tasks.payloads import PayloadSchema


class Login(BaseModel):
    user: str
    password: SecretStr

    @field_validator("password")
    @classmethod
    def _long(cls, value: SecretStr) -> SecretStr:
        if len(value.get_secret_value()) < 8:
            raise ValueError(f"{value.get_secret_value()} is too short")  # a careless message: never shown
        return value


def problems(schema: PayloadSchema, payload: Any) -> list[dict[str, Any]]:
    with pytest.raises(InvalidPayload) as refused:
        schema.check("u.login", payload)
    assert refused.value.errors == [f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in refused.value.problems]
    return refused.value.problems


def test_model__a_secret_fields_value_and_message_are_never_shown() -> None:
    found = problems(PayloadSchema(Login), {"password": "hunter2"})
    assert found == [
        {"loc": ["payload", "user"], "msg": "Field required", "type": "missing"},
        {"loc": ["payload", "password"], "msg": "not valid (value_error)", "type": "value_error"},
    ]
    checked = PayloadSchema(Login).check("u.login", {"user": "ana", "password": "correct horse"})
    assert isinstance(checked, Login) and checked.password.get_secret_value() == "correct horse"


def test_json_schema__problems_name_the_rule_not_the_value() -> None:
    schema = PayloadSchema({"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}})
    assert problems(schema, {"n": 99}) == [
        {"loc": ["payload", "n"], "msg": "must satisfy maximum 3", "type": "maximum"}
    ]
    assert schema.check("u.n", {"n": 2}) == {"n": 2}


def test_json_schema__an_invalid_schema_is_refused_when_declared() -> None:
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        PayloadSchema({"type": "no-such-type"})


def test_rules__what_requests_send_holds_no_nul_and_a_union_needs_its_tag() -> None:
    body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/In"}}}}
    document: dict[str, Any] = {
        "paths": {"/x": {"post": {"requestBody": body}}},
        "components": {"schemas": {
            "In": {"type": "object", "properties": {
                "name": {"type": "string"},
                "value": {"title": "Value"},
                "seq": {"type": "integer", "maximum": float(2**63 - 1)},
                "outcome": {"oneOf": [], "discriminator": {"propertyName": "type"}},
            }},
            "Out": {"type": "object", "properties": {"detail": {"type": "string"}}},
        }},
    }  # fmt: skip
    schemas = schema_rules.apply(document)["components"]["schemas"]
    said = schemas["In"]["properties"]
    assert said["name"]["pattern"] == schema_rules.TEXT and schemas["In"]["propertyNames"] == {
        "pattern": schema_rules.TEXT
    }
    assert said["value"] == {"title": "Value", "$ref": "#/components/schemas/JSONValue"}
    assert said["seq"]["maximum"] == 2**63 - 1 and isinstance(said["seq"]["maximum"], int)
    assert said["outcome"]["required"] == ["type"]
    assert "pattern" not in schemas["Out"]["properties"]["detail"]  # a response says what it says
