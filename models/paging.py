"""Pages in the order an index returns them: the keys ``(created_at, position, id)`` of one page of
interactions (oldest first; a step's in the order it declared them) or ``(created_at, id)`` of runs (newest
first), whatever the size of the tables.

A caller granted on many targets cannot be served by one index range: its rows are spread over one range
per target. So a page is taken per key (each granted target, and each status when a list shows them all)
from its range of an index ordered like the page, ``LIMIT n`` each (a ``LATERAL`` subquery), and the ranges'
pages are merged and cut to ``n``: the cost follows the keys and the page, never the table. A read with
one key is that one range (an admin's list, a target filter); a read of one run's rows sorts that run's.

The waits that name a person, or are escalated to a target they are granted on (docs/teams.md), are one
more page (``answerer_keys``): their answerer rows found by principal or by target, sorted; it costs what
names the caller, never the table. Pages of different sources are merged by ``merged_keys``.

The indexes (migrations 0012, 0015, 0016, 0018): interactions by (target, status, created_at, position, id)
and (status, created_at, position, id), runs by (target, created_at, id) and (created_at, id), answerers
by principal and by target.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    FromClause,
    Select,
    String,
    Subquery,
    column,
    literal,
    select,
    true,
    tuple_,
    union,
    union_all,
    values,
)

from models.status import InteractionStatus
from models.tables import Interaction, Run
from models.team_tables import InteractionAnswerer

Position = tuple[datetime, str]  # (created_at, id) of the last run of the previous page
Placed = tuple[datetime, int, str]  # (created_at, position, id) of the last interaction of the previous page


@cache
def _statuses() -> Any:
    return values(column("status", String), name="statuses").data([(s.value,) for s in InteractionStatus])


def interaction_keys(
    where: Sequence[ColumnElement[bool]],
    *,
    targets: Select[Any] | None,
    status: str | None,
    after: Placed | None,
    n: int,
    of_runs: bool = False,
    one_run: bool = False,
) -> Subquery:
    """The first ``n`` keys, oldest first, of the interactions after ``after`` that match ``where`` and
    ``status`` (``None``: any) with a target among ``targets`` (a select of one column; ``None``: any).
    ``of_runs``: ``where`` reads the interaction's run too. ``one_run``: ``where`` names one run, whose
    interactions are few: they are sorted, no range is read per target or status (each would be read whole
    to find them)."""
    keys: list[FromClause] = []
    page = select(Interaction.created_at, Interaction.position, Interaction.id).where(*where)
    if of_runs:
        page = page.join(Run, Run.id == Interaction.run_id)
    if targets is not None and one_run:
        page = page.where(Interaction.target.in_(targets))
    elif targets is not None:
        granted = targets.distinct().subquery("granted")
        keys.append(granted)
        page = page.where(Interaction.target == granted.c[0])
    if status is not None:
        page = page.where(Interaction.status == status)
    elif not one_run:
        keys.append(_statuses())
        page = page.where(Interaction.status == _statuses().c.status)
    if after is not None:
        page = page.where(tuple_(Interaction.created_at, Interaction.position, Interaction.id) > tuple_(*after))
    return _merged(page, keys, n, descending=False)


def answerer_keys(
    where: Sequence[ColumnElement[bool]],
    *,
    principal_id: str | None = None,
    targets: Select[Any] | None = None,
    status: str | None,
    after: Placed | None,
    n: int,
) -> Subquery:
    """The first ``n`` keys, oldest first, of the interactions after ``after`` that match ``where`` and
    ``status`` and are named, at a level they reached, by an answerer row that names ``principal_id`` (an
    assignee, a delegate, a named escalation level), or else a target among ``targets`` (an escalation to
    a team: a page per target, merged)."""
    rows = InteractionAnswerer
    keys: list[FromClause] = []
    page = (
        select(Interaction.created_at, Interaction.position, Interaction.id)
        .join(rows, rows.interaction_id == Interaction.id)
        .where(rows.level <= Interaction.level, *where)
    )
    if principal_id is not None:
        page = page.where(rows.principal_id == principal_id)
    else:
        assert targets is not None, "answerer_keys names a principal or targets"
        granted = targets.distinct().subquery("escalated_to")
        keys.append(granted)
        page = page.where(rows.target == granted.c[0])
    if status is not None:
        page = page.where(Interaction.status == status)
    if after is not None:
        page = page.where(tuple_(Interaction.created_at, Interaction.position, Interaction.id) > tuple_(*after))
    return _merged(page.distinct(), keys, n, descending=False)


def merged_keys(pages: Sequence[Subquery], n: int) -> Subquery:
    """The first ``n`` keys, oldest first, of the union of interaction ``pages`` (each of those functions),
    a key in two of them once."""
    both = union(*(select(page) for page in pages)).subquery("both")
    return select(both).order_by(both.c.created_at, both.c.position, both.c.id).limit(n).subquery("page")


def ranked_keys(pages: Sequence[tuple[int, Subquery]], n: int) -> Subquery:
    """The first ``n`` keys of ``(rank, page)`` pages (each cut to ``n``, no two sharing a key), each key with
    its page's ``rank``, in the order (rank, created_at, position, id): the lowest rank's page whole first."""
    ranked = union_all(*(select(literal(rank).label("rank"), *page.c) for rank, page in pages))
    both = ranked.subquery("ranked")
    order = (both.c.rank, both.c.created_at, both.c.position, both.c.id)
    return select(both).order_by(*order).limit(n).subquery("page")


def run_keys(
    where: Sequence[ColumnElement[bool]], *, targets: Select[Any] | None, before: Position | None, n: int
) -> Subquery:
    """The first ``n`` keys, newest first, of the runs before ``before`` that match ``where`` with a target
    among ``targets`` (``None``: any)."""
    keys: list[FromClause] = []
    page = select(Run.created_at, Run.id).where(*where)
    if targets is not None:
        granted = targets.distinct().subquery("granted")
        keys.append(granted)
        page = page.where(Run.target == granted.c[0])
    if before is not None:
        page = page.where(tuple_(Run.created_at, Run.id) < tuple_(*before))
    return _merged(page, keys, n, descending=True)


Keys = Select[*tuple[Any, ...]]  # a select of a page's keys: its order's columns, the id last


def _merged(page: Keys, keys: list[FromClause], n: int, *, descending: bool) -> Subquery:
    """``page`` (its columns: the order's keys, the id last) ordered and cut to ``n`` once per row of the
    ``keys`` (their product), merged and cut to ``n``."""

    def ordered(stmt: Keys, columns: Sequence[Any]) -> Keys:
        return stmt.order_by(*(column.desc() if descending else column for column in columns)).limit(n)

    if not keys:
        return ordered(page, list(page.selected_columns)).subquery("page")
    each = ordered(page, list(page.selected_columns)).lateral("each")
    joined: Any = keys[0]
    for key in keys[1:]:
        joined = joined.join(key, true())
    merged = select(*each.c).select_from(joined.join(each, true()))
    return ordered(merged, list(each.c)).subquery("page")
