"""What the seal reads (docs/operations.md, "The seal"): the entries of the final events after a seq, with the
decision records of the waits they closed, for the sweep to seal (``models.store.seals``) and for
``verify_live`` to compare each checkpoint with the tables as they are now. Nothing here writes state."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from models import decisions, event_reads
from models.access import CLOSED_EVENT_TYPES
from models.horizon import final_below
from models.record_tables import Seal
from models.sealing import Checkpoint, Entry, Finding, Verdict, checkpoint_problem, entry, event_doc, first_difference
from models.tables import Event
from parkway.db import transaction


@dataclass
class Entries:
    """Entries of events in ``seq`` order, and the earliest and latest ``at`` among those events."""

    entries: list[Entry]
    first_at: datetime | None = None
    last_at: datetime | None = None


def entries_after(session: Session, after: int, *, limit: int, through: int | None = None) -> Entries:
    """The entries of up to ``limit`` events with ``seq > after``: final ones (below the horizon, so a lower
    seq still to commit is never passed over), or those up to ``through`` when given."""
    upto = event_reads.through(through) if through is not None else event_reads.below(final_below())
    rows = session.execute(
        select(Event.seq, Event.run_id, Event.type, Event.at, Event.data)
        .where(event_reads.after(after), upto)
        .order_by(*event_reads.IN_ORDER)
        .limit(limit)
    ).all()
    closed = {row.seq: _closed_id(row.type, row.data) for row in rows}
    records = decisions.records(session, [i for i in closed.values() if i is not None])
    made = [entry(event_doc(*row), records.get(closed[row.seq] or "")) for row in rows]
    if not rows:
        return Entries(made)
    return Entries(made, min(row.at for row in rows), max(row.at for row in rows))


def _closed_id(type_: str, data: object) -> str | None:
    """The wait an event closed, if it closed one."""
    found = data.get("interaction_id") if isinstance(data, dict) and type_ in CLOSED_EVENT_TYPES else None
    return found if isinstance(found, str) else None


def verify_live(*, since: datetime | None, until: datetime | None, public_key: str) -> Verdict:
    """Each checkpoint holding events of ``[since, until)`` against the tables now, in chain order, each in
    a transaction of its own; the verdict stops at the first difference."""
    verdict = Verdict(public_key=public_key)
    previous: Checkpoint | None = None
    in_range = [*([Seal.last_at >= since] if since else []), *([Seal.first_at < until] if until else [])]
    for cp in checkpoints(*in_range):
        if previous is None and cp.position > 0:
            with transaction() as session:
                previous = as_checkpoint(session.get(Seal, cp.position - 1))
            if previous is None:
                verdict.finding = Finding(None, f"checkpoint {cp.position - 1} is missing")
                return verdict
        verdict.finding = checkpoint_problem(cp, previous, public_key) or live_difference(cp)
        if verdict.finding is not None:
            return verdict
        verdict.checkpoints += 1
        verdict.events += cp.count
        verdict.decisions += sum(1 for e in cp.entries if e[2] is not None)
        verdict.sealed_through, previous = cp.last_seq, cp
    return verdict


def live_difference(cp: Checkpoint) -> Finding | None:
    """The first seq of ``cp``'s range at which the tables now differ from what it sealed."""
    with transaction() as session:
        now = entries_after(session, cp.after_seq, limit=cp.count + 1, through=cp.last_seq)
    return first_difference(cp.entries, now.entries)


def checkpoints(*where: ColumnElement[bool]) -> Iterator[Checkpoint]:
    """The seals matching ``where``, in chain order, one at a time, each read in a transaction of its own."""
    position = -1
    while True:
        with transaction() as session:
            found = session.scalars(select(Seal).where(Seal.position > position, *where).order_by(Seal.position))
            cp = as_checkpoint(found.first())
        if cp is None:
            return
        position = cp.position
        yield cp


def spanning(lowest: int, highest: int) -> Iterator[Checkpoint]:
    """The seals whose ranges hold a seq in ``[lowest, highest]`` (what an export of those decisions carries)."""
    return checkpoints(Seal.last_seq >= lowest, Seal.after_seq < highest)


def as_checkpoint(seal: Seal | None) -> Checkpoint | None:
    if seal is None:
        return None
    return Checkpoint(seal.position, seal.after_seq, seal.last_seq, seal.count, seal.prev, seal.hash,
                      seal.signature, seal.entries)  # fmt: skip
