"""What every request refuses (``api.input``), said in the OpenAPI so a generated client knows it: no text
anywhere holds NUL (PostgreSQL cannot store it), in a string or in an object's key, at any depth of a JSON
value; a union told apart by a property (``type``, ``kind``) needs that property; an integer's bounds are
integers (FastAPI writes them as floats, and 2**63 - 1 as a float is 2**63, one past PostgreSQL's bigint).
Applied to the whole document once, so a field added tomorrow says it too."""

from __future__ import annotations

from typing import Any

from api.schemas import TEXT

BIGINT = (-(2**63), 2**63 - 1)
COMPONENTS = "#/components/schemas/"
JSON_VALUE = "JSONValue"
JSON_REF = {"$ref": f"{COMPONENTS}{JSON_VALUE}"}
# Any JSON whose strings and keys hold no NUL. Untyped: each keyword applies to the values of its own type.
JSON_VALUE_SCHEMA: dict[str, Any] = {
    "description": "any JSON value; no string or object key in it contains NUL (\\u0000)",
    "pattern": TEXT,
    "propertyNames": {"pattern": TEXT},
    "items": JSON_REF,
    "additionalProperties": JSON_REF,
}
SHAPE = {"type", "$ref", "anyOf", "oneOf", "allOf", "not", "enum", "const", "items", "properties", "pattern"}
ANNOTATIONS = {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly"}
NESTED = ("properties", "$defs", "patternProperties")
NESTED_ONE = ("items", "additionalProperties", "not", "contentSchema", "propertyNames")
NESTED_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")


def apply(document: dict[str, Any]) -> dict[str, Any]:
    """Say the rules in ``document`` (changed in place, and returned): in what requests send, their
    parameters and bodies and every component they reach (a response says what it says)."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    sent: list[dict[str, Any]] = []
    for methods in document.get("paths", {}).values():
        for operation in methods.values():
            sent.extend(p for p in operation.get("parameters", []) if "schema" in p)
            sent.extend(operation.get("requestBody", {}).get("content", {}).values())
    for holder in sent:
        holder["schema"] = _said(holder["schema"])
    for name in _reached([holder["schema"] for holder in sent], schemas):
        schemas[name] = _said(schemas[name])
    schemas[JSON_VALUE] = JSON_VALUE_SCHEMA
    return document


def _reached(roots: list[Any], schemas: dict[str, Any]) -> set[str]:
    """The names of the components ``roots`` refer to, directly or through one another."""
    found: set[str] = set()
    todo = list(roots)
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(COMPONENTS):
                name = ref[len(COMPONENTS) :]
                if name not in found and name in schemas:
                    found.add(name)
                    todo.append(schemas[name])
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return found


def _said(schema: Any) -> Any:
    """``schema`` with the rules: any JSON becomes ``JSONValue``, a plain string gets the no-NUL pattern, a
    discriminated union requires its discriminating property."""
    if not isinstance(schema, dict):
        return schema
    if not SHAPE & schema.keys() and schema.keys() <= ANNOTATIONS:
        return {**schema, **JSON_REF}
    said = dict(schema)
    for key in NESTED:
        if isinstance(said.get(key), dict):
            said[key] = {name: _said(value) for name, value in said[key].items()}
    for key in NESTED_ONE:
        if isinstance(said.get(key), dict):
            said[key] = _said(said[key])
    for key in NESTED_MANY:
        if isinstance(said.get(key), list):
            said[key] = [_said(value) for value in said[key]]
    kinds = said.get("type")
    plain = not ({"pattern", "enum", "const", "format"} & said.keys())
    if plain and (kinds == "string" or (isinstance(kinds, list) and "string" in kinds)):
        said["pattern"] = TEXT
    if kinds == "object" or (isinstance(kinds, list) and "object" in kinds):
        said.setdefault("propertyNames", {"pattern": TEXT})
        if said.get("additionalProperties", True) is True:  # what a request sends: any key, no NUL in it
            said["additionalProperties"] = JSON_REF
    if (kinds == "array" or (isinstance(kinds, list) and "array" in kinds)) and "items" not in said:
        said["items"] = JSON_REF
    if kinds == "integer":
        _integer_bounds(said)
    tag = (said.get("discriminator") or {}).get("propertyName")
    if tag and tag not in said.get("required", []):
        said["required"] = [*said.get("required", []), tag]
    return said


def _integer_bounds(schema: dict[str, Any]) -> None:
    """Bounds as integers, within PostgreSQL's bigint (the widest integer the API stores)."""
    for key, clamp in (("minimum", max), ("maximum", min)):
        bound = schema.get(key)
        if isinstance(bound, float) and bound.is_integer():
            edge = BIGINT[0] if key == "minimum" else BIGINT[1]
            schema[key] = clamp(int(bound), edge)
