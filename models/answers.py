"""What an answer's value must be before the store records it: valid against its interaction's schema, and
split into the clear part and the sealed (encrypted) sensitive fields."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from functools import lru_cache
from typing import Any, Protocol

from jsonschema import Draft202012Validator

from models.status import InteractionKind
from parkway.crypto import split_sensitive
from parkway.errors import InvalidAnswer

PERMISSION_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}},
    "required": ["approved"],
    "additionalProperties": False,
}


class Asked(Protocol):
    """What validation reads of an interaction (an ORM row or the answer's read)."""

    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def schema(self) -> Any: ...
    @property
    def sensitive(self) -> Any: ...


@lru_cache(maxsize=512)
def _validator(schema_json: str) -> Draft202012Validator:
    """Compiled validators, by schema text: building one costs far more than validating with it."""
    return Draft202012Validator(json.loads(schema_json))


def _validator_of(interaction: Asked) -> Draft202012Validator:
    schema = PERMISSION_SCHEMA if interaction.kind == InteractionKind.PERMISSION else interaction.schema
    return _validator(json.dumps(schema or {}, sort_keys=True))


def validate_value(interaction: Asked, value: Any) -> None:
    """Raise ``InvalidAnswer`` (nothing stored) when the value fails the interaction's schema."""
    errors = sorted(_validator_of(interaction).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        sensitive = {str(k) for k in (interaction.sensitive or [])}
        messages = [_describe(e, sensitive) for e in errors][:20]
        raise InvalidAnswer(
            f"the value does not match the schema of interaction {interaction.id} ({messages[0]})",
            {"id": interaction.id, "status": interaction.status},
            errors=messages,
        )


def seal_value(interaction: Asked, value: Any) -> tuple[Any, str | None]:
    """Split a value into what is stored in clear and the sealed (encrypted) sensitive fields."""
    return split_sensitive(value, [str(k) for k in (interaction.sensitive or [])])


# The schemas of the waits this process answered last, by the database's digest of them (``parkway_vouch``,
# migration 0027: kind, schema and sensitive fields), those without sensitive fields only: an answer names the
# ones its value passes, and the answer's function writes it at once when its wait has one of them.
_VOUCHABLE = 16
_seen: OrderedDict[str, Draft202012Validator] = OrderedDict()
_seen_lock = threading.Lock()


def remember(digest: str, interaction: Asked) -> None:
    """``interaction``'s schema (its value just validated), to vouch for the next values by."""
    if interaction.sensitive:
        return  # its value is split and sealed first: always validated after the read
    validator = _validator_of(interaction)
    with _seen_lock:  # answers over HTTP run on several threads
        _seen[digest] = validator
        _seen.move_to_end(digest)
        while len(_seen) > _VOUCHABLE:
            _seen.popitem(last=False)


def vouched(value: Any) -> list[str]:
    """The digests of the remembered schemas that ``value`` is valid against."""
    return [digest for digest, validator in list(_seen.items()) if validator.is_valid(value)]


def _describe(error: Any, sensitive: set[str]) -> str:
    """A schema violation as a sentence; never quoting a sensitive field's value."""
    where = "/".join(map(str, error.path)) or "(value)"
    secret = bool(sensitive) and (not error.path or str(error.path[0]) in sensitive)
    if secret and error.validator not in ("required", "additionalProperties"):
        return f"{where}: does not match the schema ({error.validator})"
    return f"{where}: {error.message}"
