"""Schemathesis hooks of ``tests/api/test_fuzz.py`` (``SCHEMATHESIS_HOOKS``), so that ``positive_data_acceptance``
(ST202: a schema-valid request rejected) runs on every operation and says what it exists to say: a 422 for
what the OpenAPI could have said (a pattern, an enum, typed items) fails the run.

A schema describes shapes. A 410 is dropped (the wait ended: the resource's state, not the request's shape),
and a 422 for what no schema can know, each by its code (docs/api.md):
- ``invalid_cursor``: a cursor of the right form this API never handed out (cursors are opaque);
- ``unknown_principal``: a grant for a name no principal has;
- ``invalid_outcome``: a park whose rules span fields or people (unique keys, times in order, a quorum more
  people than could ever answer);
- ``invalid_answer``, ``invalid_delegation``: a value checked against that interaction's own schema, a
  person who holds no place on it;
- a webhook or push handler URL whose host does not resolve, or resolves where it may not be reached; a
  replay past the subscription's cursor (its state).

The principals the fuzz runs as, and their grants, are spared (``before_call``): the admin found their ids in
its own list responses, rotated its own token, and fuzzed the rest of the API with a dead one (401s only).
"""

from __future__ import annotations

import json
import os
from typing import Any

import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData

BEYOND_A_SCHEMA = {"invalid_cursor", "unknown_principal", "invalid_outcome", "invalid_answer", "invalid_delegation"}
STATE_REFUSALS = ("a webhook URL is", "not a URL", "the host ", "a replay goes back")  # validation_error details


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but an ST202 whose 410 or 422 is for what no schema can say."""
    if not isinstance(failure, RejectedPositiveData):
        return True
    if response.status_code != 422:
        return response.status_code != 410
    try:
        body = response.json()
    except ValueError:
        return True
    code, detail = body.get("error"), str(body.get("detail", ""))
    return code not in BEYOND_A_SCHEMA and not (code == "validation_error" and detail.startswith(STATE_REFUSALS))


def lease_wait_max_s(operation: Any) -> float:
    """The bound the served OpenAPI itself puts on a lease's ``wait_s``: read there, so that a schemathesis
    process imports none of the app (its models, SQLAlchemy) for one number."""
    ref = operation.definition.raw["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = operation.schema.raw_schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return float(body["properties"]["wait_s"]["maximum"])


@schemathesis.hook
def map_body(context: Any, body: Any) -> Any:
    """A lease's long poll waits up to ``wait_s`` by design: the fuzz asks for its answer at once. A ``wait_s``
    the schema refuses is left as generated: that case is schemathesis's negative test (the API refuses it at
    once), and replacing it made a valid request the fuzz counted as invalid data accepted (ST201)."""
    operation = context.operation
    if operation is not None and operation.path == "/v1/worker/lease" and isinstance(body, dict):
        wait = body.get("wait_s", 0)
        if isinstance(wait, int | float) and not isinstance(wait, bool) and 0 <= wait <= lease_wait_max_s(operation):
            return {**body, "wait_s": 0}
    return body


# {operation: {"parameter": its name, "keep": [ids of the fuzz's own principals or grants], "spare": an id}}
SPARED: dict[str, dict[str, Any]] = json.loads(os.environ.get("PARKWAY_FUZZ_SPARED", "{}"))


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """A request that would take a token or a grant from a principal the fuzz runs as (a token rotated, a
    principal disabled, a grant revoked) is aimed at the spare one instead: the same operation, on an id the
    runs do not need."""
    spared = SPARED.get(case.operation.label)
    parameters = case.path_parameters or {}
    if spared and parameters.get(spared["parameter"]) in spared["keep"]:
        parameters[spared["parameter"]] = spared["spare"]
