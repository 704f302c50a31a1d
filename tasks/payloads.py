"""What a step declares its payload to be (``@step(name, payload=...)``): a pydantic model (or any type
pydantic can validate) or a JSON Schema. A start is checked against it before anything is stored, and the
body receives the validated payload. A field marked secret (``SecretStr``, or ``writeOnly`` in its schema)
never has its value, nor a message about it, echoed in an error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from parkway.errors import InvalidPayload

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

MAX_PROBLEMS = 20
NAMES_ONLY = ("required", "additionalProperties", "unevaluatedProperties")  # their messages quote names, not values


@dataclass(frozen=True)
class Problem:
    """One way a payload misses its schema: where (``loc``, from ``payload``), what (``msg``), which rule."""

    loc: tuple[str | int, ...]
    msg: str
    type: str

    def line(self) -> str:
        return f"{'.'.join(map(str, self.loc))}: {self.msg}"


class PayloadSchema:
    """A step's declared payload: ``check`` refuses what does not match (``InvalidPayload``, nothing stored);
    ``body_input`` is what the body receives; ``json_schema`` what the OpenAPI shows."""

    def __init__(self, declared: Any) -> None:
        self.declared = declared
        if isinstance(declared, dict):
            from jsonschema import Draft202012Validator  # only for a schema given as JSON
            from jsonschema.exceptions import SchemaError

            try:
                Draft202012Validator.check_schema(declared)
            except SchemaError as exc:
                raise ValueError(f"a step's payload schema is not a valid JSON Schema: {exc.message}") from None
            self._validator: Draft202012Validator | None = Draft202012Validator(declared)
            self._adapter: TypeAdapter[Any] | None = None
            schema = declared
        else:
            self._validator, self._adapter = None, TypeAdapter(declared)
            schema = self._adapter.json_schema()
        self._secret = frozenset(_secret_names(schema))

    def json_schema(self, ref_template: str) -> dict[str, Any]:
        if self._adapter is None:
            return dict(self.declared)
        return self._adapter.json_schema(ref_template=ref_template)

    def check(self, workflow: str, payload: Any) -> Any:
        """What the body receives (the model's instance; for a JSON Schema, the payload as it is), or
        ``InvalidPayload`` naming each problem (at most 20) when it does not match."""
        problems = list(self._problems(payload))[:MAX_PROBLEMS]
        if problems:
            shown = "; ".join(p.line() for p in problems[:3])
            raise InvalidPayload(
                f"the payload does not match what step {workflow} declares: {shown}",
                errors=[p.line() for p in problems],
                problems=[{"loc": list(p.loc), "msg": p.msg, "type": p.type} for p in problems],
            )
        return payload if self._adapter is None else self._adapter.validate_python(payload)

    def _problems(self, payload: Any) -> Iterator[Problem]:
        if self._validator is not None:
            for error in sorted(self._validator.iter_errors(payload), key=lambda e: [str(p) for p in e.path]):
                yield self._schema_problem(error)
            return
        assert self._adapter is not None
        try:
            self._adapter.validate_python(payload)
        except ValidationError as exc:
            for error in exc.errors(include_url=False, include_context=False, include_input=False):
                loc = ("payload", *error["loc"])
                secret = any(part in self._secret for part in loc)
                yield Problem(loc, f"not valid ({error['type']})" if secret else error["msg"], error["type"])

    def _schema_problem(self, error: Any) -> Problem:
        loc = ("payload", *error.path)
        rule = str(error.validator)
        if rule in NAMES_ONLY:
            return Problem(loc, error.message, rule)
        if any(part in self._secret for part in loc):
            return Problem(loc, f"not valid ({rule})", rule)
        # jsonschema's own message quotes the value: say the rule instead
        wanted = json.dumps(error.validator_value, default=str)
        return Problem(loc, f"must satisfy {rule} {wanted[:120]}", rule)


def _secret_names(schema: Any) -> Iterator[str]:
    """The names of properties anywhere in ``schema`` marked secret: ``writeOnly`` (``SecretStr``'s mark)."""
    if isinstance(schema, dict):
        for name, prop in (schema.get("properties") or {}).items():
            if _marked_secret(prop):
                yield name
        for value in schema.values():
            yield from _secret_names(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _secret_names(value)


def _marked_secret(prop: Any) -> bool:
    if not isinstance(prop, dict):
        return False
    if prop.get("writeOnly") is True:
        return True
    return any(_marked_secret(s) for key in ("anyOf", "oneOf", "allOf") for s in prop.get(key, []))
