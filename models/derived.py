"""A run's and a step's status as every reader shows it and filters by it, derived in the database.

The answer does not write ``waiting -> running`` nor ``parked -> resuming`` (issue 42: two row writes fewer
per completion): a parked step whose resume continuation is ready or claimed IS resuming, a waiting run with
such a step IS running. ``parkway_step_status`` and ``parkway_run_status`` (migration 0029) are that rule,
once; the answer's own function reads it too. The word stored (``stored_status`` in the ORM, the column
``status`` of the Core tables) is what the transitions compare and set.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import String, and_, func, or_
from sqlalchemy.orm import ColumnProperty

# What the rule changes, all it changes: the word a run or step reads as while its step resumes, from the
# word stored.
_RESUMING = {"waiting": "running", "parked": "resuming"}


def run_status(runs: Any) -> Any:
    """The status of the row of ``runs`` (the table or an alias of it) in the enclosing read."""
    return func.parkway_run_status(runs.c.id, runs.c.status, type_=String(16))


def step_status(steps: Any) -> Any:
    """The status of the row of ``steps`` (the table or an alias of it) in the enclosing read."""
    return func.parkway_step_status(steps.c.id, steps.c.status, type_=String(16))


class StatusComparator(ColumnProperty.Comparator[str]):
    """``Run.status == word`` (``Step.status`` too) as a filter the planner can judge: the stored word
    compared, the rule asked only of the rows whose word it may change. Were the rule compared alone, the
    planner, which cannot see into a function, would guess how many rows a list's filter keeps, and read
    a target's every run to sort them rather than its index in order (tests/integration/test_list_plans.py)."""

    def __eq__(self, other: Any) -> Any:
        derived = self.__clause_element__().element  # the rule's call: (id, stored word)
        if not isinstance(other, str):
            return derived == other
        stored = derived.clauses.clauses[1]
        read_from = [word for word, resuming in _RESUMING.items() if resuming == other]
        if read_from:  # running, resuming: stored so, or read so
            return or_(stored == other, and_(stored == read_from[0], derived == other))
        if other in _RESUMING:  # waiting, parked: stored so, and not read otherwise
            return and_(stored == other, derived != _RESUMING[other])
        return stored == other


class DerivedStatus:
    """For ``Run`` and ``Step``: ``status`` is read through the rule (a ``column_property``, read-only), the
    stored word is ``stored_status``; ``Run(status=...)`` sets the stored word, as it did."""

    def __init__(self, **values: Any) -> None:
        if "status" in values:
            values["stored_status"] = values.pop("status")
        super().__init__(**values)
