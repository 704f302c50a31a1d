"""A reference to a step or a continuation: its key as a string (``"deploy.execute"``,
``"deploy.decide@1"``), or the decorated function itself (``Next(execute)``, ``Park(continuation=decide)``).

The decorators of ``tasks.sdk`` mark a function with the keys it is registered under (``mark``);
``key_of`` turns a reference into its key, and is the one place that does.
"""

from __future__ import annotations

from typing import Any

from models.status import ContinuationKind
from parkway.errors import WorkflowError

MARK = "__parkway_keys__"  # on a decorated function: {kind: [keys it is registered under]}
DECORATOR = {ContinuationKind.START: "@step", ContinuationKind.RESUME: "@continuation"}


def mark(fn: Any, kind: str, key: str) -> None:
    """Note on ``fn`` that it is registered as ``key`` (a step name for ``start``, ``name@version`` for
    ``resume``)."""
    keys = fn.__dict__.setdefault(MARK, {}).setdefault(kind, [])
    if key not in keys:
        keys.append(key)


def keys_of(fn: Any, kind: str) -> list[str]:
    """The keys ``fn`` is registered under as a step (``start``) or a continuation (``resume``)."""
    return list(getattr(fn, MARK, {}).get(kind, []))


def key_of(ref: Any, kind: str) -> Any:
    """The key ``ref`` names: a decorated function's own key; anything else as it is (a string is then
    checked as a key by whoever reads it). Raises ``WorkflowError`` (its text: "``fn``, which …") for a
    function not decorated as that kind, or registered under more than one key of it (name one as a string)."""
    if isinstance(ref, str) or not callable(ref):
        return ref
    keys = keys_of(ref, kind)
    name = getattr(ref, "__qualname__", repr(ref))
    if not keys:
        raise WorkflowError(f"{name}, which is not decorated with {DECORATOR[ContinuationKind(kind)]}")
    if len(keys) > 1:
        raise WorkflowError(f"{name}, which is registered as {' and '.join(keys)}: name the one meant as a string")
    return keys[0]
