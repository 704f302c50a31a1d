"""Registered step bodies (by name) and continuations (by ``name@version``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from parkway.errors import NotRegistered
from tasks.payloads import PayloadSchema

StepFn = Callable[..., Any]

_steps: dict[str, StepFn] = {}
_continuations: dict[str, StepFn] = {}
_payloads: dict[str, PayloadSchema] = {}  # by step name: what its payload is declared to be


def continuation_key(name: str, version: int) -> str:
    return f"{name}@{version}"


def register_step(name: str, fn: StepFn, payload: Any = None) -> None:
    """Register a step body; ``payload`` (a pydantic model or a JSON Schema) is what its payload must be."""
    schema = None if payload is None else PayloadSchema(payload)  # a bad schema is refused before registering
    _register(_steps, name, fn, "step")
    if schema is None:
        _payloads.pop(name, None)
    else:
        _payloads[name] = schema


def register_continuation(name: str, version: int, fn: StepFn) -> None:
    if "@" in name or isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"continuation {name!r} needs a plain name and an integer version >= 1")
    _register(_continuations, continuation_key(name, version), fn, "continuation")


def _register(table: dict[str, StepFn], key: str, fn: StepFn, what: str) -> None:
    if not key or not isinstance(key, str):
        raise ValueError(f"a {what} needs a non-empty name")
    old = table.get(key)
    # Re-importing a module registers the same function again; a different one is a mistake.
    if old is not None and (old.__module__, old.__qualname__) != (fn.__module__, fn.__qualname__):
        raise ValueError(f"{what} {key} is already registered by {old.__module__}.{old.__qualname__}")
    table[key] = fn


def step_body(name: str) -> StepFn:
    try:
        return _steps[name]
    except KeyError:
        raise NotRegistered(f"step {name} is not registered in this process") from None


def checked_payload(name: str, payload: Any) -> Any:
    """What step ``name``'s body receives for ``payload``: the payload as it is when the step declares none,
    else its validated form; ``InvalidPayload`` when it does not match."""
    schema = _payloads.get(name)
    return payload if schema is None else schema.check(name, payload)


def payload_schemas() -> dict[str, PayloadSchema]:
    """The steps of this process that declare their payload, by name (the OpenAPI shows them)."""
    return dict(_payloads)


def continuation_body(key: str) -> StepFn:
    try:
        return _continuations[key]
    except KeyError:
        raise NotRegistered(f"continuation {key} is not registered in this process") from None


def modules() -> set[str]:
    """The modules whose functions are registered (``parkway check`` reads their source)."""
    return {fn.__module__ for fn in (*_steps.values(), *_continuations.values())}


def has_step(name: str) -> bool:
    return name in _steps


def has_continuation(key: str) -> bool:
    return key in _continuations


_imported: set[str] = set()  # modules of PARKWAY_IMPORTS this process has imported through ``import_workflows``


def import_workflows() -> None:
    """Import the modules ``PARKWAY_IMPORTS`` names, each once per process: what registers the workflows'
    steps and continuations. The worker and the API import them at start; a plain script calling the SDK
    gets them on first need (an import error is raised as it is, naming the module)."""
    import importlib

    from parkway.settings import get_settings

    for module in get_settings().import_modules:
        if module not in _imported:
            importlib.import_module(module)
            _imported.add(module)


def keys(kind: str) -> frozenset[str]:
    """What this process runs and its worker advertises: the step names (``start``), or every registered
    continuation ``name@version`` (``resume``)."""
    return frozenset(_steps if kind == "start" else _continuations)


def has(kind: str, key: str) -> bool:
    """Whether this process runs ``key`` (a continuation row's ``kind`` and ``name``)."""
    return (has_step if kind == "start" else has_continuation)(key)
