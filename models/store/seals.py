"""The seal of the event log (docs/operations.md, "The seal"): the chain's head moves by one checkpoint."""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from models.base import utcnow
from models.record_tables import Seal
from models.seal_reads import entries_after
from models.sealing import GENESIS, Checkpoint, chained
from parkway.crypto import sign_seal


@cache
def _head() -> Any:
    return select(Seal.position, Seal.last_seq, Seal.hash).order_by(Seal.position.desc()).limit(1)


def seal_next(session: Session, *, batch: int) -> Checkpoint | None:
    """head -> head + 1: the next up to ``batch`` final events after the chain's head (with the decisions
    they closed) sealed as one signed checkpoint at the next position. ``None``: no final event is
    unsealed, or another pass sealed that position first (the insert is the compare-and-set on the head:
    nothing is written twice, and no event is skipped, as the next checkpoint starts where the head ends)."""
    head = session.execute(_head()).first()
    position, after, prev = (head.position + 1, head.last_seq, head.hash) if head else (0, 0, GENESIS)
    found = entries_after(session, after, limit=batch)
    if not found.entries:
        return None
    last = found.entries[-1][0]
    cp = Checkpoint(position, after, last, len(found.entries), prev, chained(prev, found.entries), "", found.entries)
    cp.signature = sign_seal(cp.signed_part())
    inserted = session.execute(
        pg_insert(Seal)
        .values(**cp.as_dict(), first_at=found.first_at, last_at=found.last_at, sealed_at=utcnow())
        .on_conflict_do_nothing()
        .returning(Seal.position)
    ).first()
    return cp if inserted is not None else None
