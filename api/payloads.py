"""A run's payload as the API shows it: the start route's body in the OpenAPI, one variant per workflow this
process knows: a workflow whose first step declares its payload (``@step(name, payload=...)``) has a body whose
``payload`` is that schema (a component ``workflow.<name>.payload``, its nested models beside it); every other
registered workflow shares one variant whose ``payload`` is any JSON. The ``RunCreate`` component stays the
generic shape, for clients written against any workflow. Workflows only remote workers serve are accepted too
(a worker has advertised them) but are not listed: this process does not know them. A refused payload is the
usual 422 (``ValidationErrorBody``, its ``problems`` listed)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from api import schema_rules
from parkway.errors import InvalidPayload
from tasks import registry
from tasks.payloads import PayloadSchema

START = ("/v1/runs", "post")
COMPONENTS = "#/components/schemas/"


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` add the workflows' variants to FastAPI's document (built once), for the
    workflows registered when it is asked (the API imports ``PARKWAY_IMPORTS`` as it starts), and say the
    rules every request is held to (``api.schema_rules``)."""
    build: Callable[[], dict[str, Any]] = app.openapi
    made: dict[tuple[str, ...], dict[str, Any]] = {}

    def openapi() -> dict[str, Any]:
        steps = tuple(sorted(registry.keys("start")))
        if steps not in made:
            made.clear()
            # The rules before (RunCreate, which the variants copy) and after (the payloads' own schemas)
            base = schema_rules.apply(copy.deepcopy(build()))
            made[steps] = schema_rules.apply(with_workflows(base, steps, registry.payload_schemas()))
        return made[steps]

    app.openapi = openapi  # type: ignore[method-assign]


def with_workflows(base: dict[str, Any], steps: tuple[str, ...], declared: dict[str, PayloadSchema]) -> dict[str, Any]:
    """A copy of ``base`` whose start route takes one of the workflows' bodies (when any is registered)."""
    document = copy.deepcopy(base)
    if not steps:
        return document
    schemas: dict[str, Any] = document["components"]["schemas"]
    generic = schemas["RunCreate"]
    variants = []
    for name in sorted(declared):
        prefix = f"workflow.{_safe(name)}."
        schemas.update(_payload_components(prefix, declared[name]))
        required = [*generic.get("required", []), "payload"] if _needs_payload(name, declared[name]) else None
        variants.append(_variant(schemas, generic, f"{prefix}start", [name], {"$ref": f"{COMPONENTS}{prefix}payload"},
                                 required))  # fmt: skip
    others = [name for name in steps if name not in declared]
    if others:
        variants.append(_variant(schemas, generic, "workflow.others.start", others, None, None))
    body = document["paths"][START[0]][START[1]]["requestBody"]["content"]["application/json"]
    body["schema"] = {"oneOf": variants}
    return document


def _variant(
    schemas: dict[str, Any],
    generic: dict[str, Any],
    component: str,
    names: list[str],
    payload: dict[str, Any] | None,
    required: list[str] | None,
) -> dict[str, str]:
    """A component: the generic body whose ``workflow`` is one of ``names`` (and ``payload`` that schema)."""
    shape = copy.deepcopy(generic)
    shape["title"] = f"Start {names[0]}" if payload is not None else "Start another workflow"
    shape["properties"]["workflow"] = {**shape["properties"]["workflow"], "enum": names}
    if payload is not None:
        shape["properties"]["payload"] = {**payload, "description": f"what step {names[0]} declares"}
    if required is not None:
        shape["required"] = required
    schemas[component] = shape
    return {"$ref": f"{COMPONENTS}{component}"}


def _payload_components(prefix: str, declared: PayloadSchema) -> dict[str, Any]:
    """The payload's schema as ``<prefix>payload``, and the models it nests as ``<prefix><Model>``."""
    schema = declared.json_schema(ref_template=f"{COMPONENTS}{prefix}{{model}}")
    schema = _relocated(schema, prefix)
    nested = schema.pop("$defs", {})
    schema.pop("$schema", None)
    return {f"{prefix}payload": schema, **{f"{prefix}{key}": value for key, value in nested.items()}}


def _relocated(schema: Any, prefix: str) -> Any:
    """A hand-written JSON Schema's own ``#/$defs/X`` references, pointing where its ``$defs`` now live."""
    if isinstance(schema, dict):
        return {
            key: f"{COMPONENTS}{prefix}{value[len('#/$defs/') :]}"
            if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/")
            else _relocated(value, prefix)
            for key, value in schema.items()
        }
    if isinstance(schema, list):
        return [_relocated(value, prefix) for value in schema]
    return schema


def _needs_payload(name: str, declared: PayloadSchema) -> bool:
    """Whether a start must send a payload: the default ``{}`` does not match what the step declares."""
    try:
        declared.check(name, {})
    except InvalidPayload:
        return True
    return False


def _safe(name: str) -> str:
    """A workflow's name as a component name may spell it (``^[A-Za-z0-9._-]+$``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)
