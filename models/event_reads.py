"""Ranges of the event log by ``seq`` that read through an index: each bound on an event's ``seq`` comes with
the same bound on its batch's key (``Event.batch_seq``, ``event_batches.first_seq``), which the view passes
down to the table; the condition on ``seq`` itself then keeps exactly the events asked for.

A batch's events are one transaction's, numbered from its ``first_seq`` up within that transaction's block
of 65536 numbers (``seq`` = transaction id << 16 | n, migration 0004; a row written before 0004 holds one
event). So an event above ``n`` is in a batch starting at or above ``n``'s block, and one at or below
``n`` in a batch starting at or below ``n``. Ordered by (``batch_seq``, ``seq``), the events come in ``seq``
order (batches do not overlap) and the batches in the order of their index, so a ``LIMIT`` stops early.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_

from models.event_tables import Event

BLOCK = 1 << 16  # the numbers of one transaction's events

IN_ORDER = (Event.batch_seq, Event.seq)
NEWEST_FIRST = (Event.batch_seq.desc(), Event.seq.desc())


def after(n: Any) -> ColumnElement[bool]:
    """``seq > n`` (an int or a column)."""
    return and_(Event.seq > n, Event.batch_seq >= (n // BLOCK) * BLOCK)


def through(n: Any) -> ColumnElement[bool]:
    """``seq <= n``."""
    return and_(Event.seq <= n, Event.batch_seq <= n)


def below(n: Any) -> ColumnElement[bool]:
    """``seq < n`` where ``n`` is the first ``seq`` of a transaction's block (``horizon.final_below()``): then
    a batch below it is below it whole, and the horizon's subquery runs once."""
    bound: ColumnElement[bool] = Event.batch_seq < n
    return bound


def at(n: Any) -> ColumnElement[bool]:
    """``seq = n``."""
    return and_(Event.seq == n, Event.batch_seq <= n, Event.batch_seq >= (n // BLOCK) * BLOCK)
