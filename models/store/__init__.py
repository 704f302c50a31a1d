"""The store: every state transition of Parkway, each a compare-and-set inside the caller's transaction.

Functions take the caller's session (or connection) and never commit; the caller owns the transaction
(``parkway.db.transaction``, or ``single_statement`` for a transition that is one statement). A transition
returns the changed row, or ``None``/``False`` (an outcome value) when it lost the race: losing a race is
a normal outcome. Only this package writes state; ``models.access`` is the read side for the API.

One module per entity. ``from models import store; store.answer(...)`` reaches every public name
(``models.store.exports`` lists them), imported on first use: a process that needs one transition (a CLI
command) imports its module alone, not the whole store.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from models.store.exports import *  # noqa: F403
    from models.store.exports import __all__ as __all__


def __getattr__(name: str) -> Any:
    value = getattr(import_module("models.store.exports"), name)
    globals()[name] = value
    return value
