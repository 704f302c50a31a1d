"""What operators see of the fleet during a rolling deploy: the continuation versions work is waiting on, and
whether a live worker runs each (``models.served``), at once and without the grace.

- ``unserved_counts`` (``/metrics``, read at every scrape): the parked steps per version no live worker
  advertises, from the skip scan of ``ix_interactions_pending_continuation`` (``fail_closed.parked_keys``) and
  a range of it per unserved version: the cost follows the distinct parked versions and the waits on
  unserved ones, never every wait.
- ``versions`` (``GET /v1/workers``, ``parkway workers``, on demand): every version that parked steps or due
  continuations still need, served or not, and of one no live worker serves the time left of its grace
  (``models.served.grace_left``, the rule fail-closed applies). A version is safe to retire once it is not
  listed.
- ``unserved_versions`` (a run's page): the versions one run waits on that no live worker runs.
"""

from __future__ import annotations

from functools import cache
from typing import Any, cast

from sqlalchemy import Table, case, distinct, func, literal, select, union_all
from sqlalchemy.orm import Session

from models.fail_closed import parked_keys
from models.fleet_view import VersionLoad as VersionLoad
from models.fleet_view import version_load
from models.served import ADVERTISED, grace_left, served
from models.status import ContinuationKind, ContinuationStatus, InteractionStatus
from models.store.sql import CONT, by_name, word, words
from models.tables import Interaction

_I = cast(Table, Interaction.__table__)
_PENDING = _I.c.status == word(InteractionStatus.PENDING)
_RESUME = ContinuationKind.RESUME.value


def _served(version: Any) -> Any:
    return served(_RESUME, version)


def _parked_steps(version: Any) -> Any:
    """The parked steps waiting on ``version``: a range of ``ix_interactions_pending_continuation``."""
    return select(func.count(distinct(_I.c.step_id))).where(_PENDING, _I.c.continuation == version).scalar_subquery()


@cache
def _unserved_counts() -> Any:
    keys = parked_keys()
    return (
        select(keys.c.key, _parked_steps(keys.c.key))
        .where(keys.c.key.is_not(None), ~_served(keys.c.key))
        .order_by(keys.c.key)
    )


def unserved_counts(session: Session) -> dict[str, int]:
    """The parked steps waiting on each continuation version no live worker advertises now, by
    ``name@version`` (those past the grace fail closed at the next sweep, unless no worker is alive)."""
    return {str(key): int(count) for key, count in session.execute(_unserved_counts())}


def _first_wait(version: Any) -> Any:
    """When the oldest pending wait on ``version`` began: a range of ``ix_interactions_pending_continuation``."""
    return select(func.min(_I.c.created_at)).where(_PENDING, _I.c.continuation == version).scalar_subquery()


@cache
def _versions() -> Any:
    keys = parked_keys()
    parked = select(keys.c.key.label("version"), _parked_steps(keys.c.key).label("parked"), literal(0).label("due"),
                    _first_wait(keys.c.key).label("since"))  # fmt: skip
    due = (
        select(CONT.c.name, literal(0), func.count(), func.min(CONT.c.created_at))
        .where(
            CONT.c.status.in_(words((ContinuationStatus.READY, ContinuationStatus.CLAIMED))),
            CONT.c.kind == word(_RESUME),
        )
        .group_by(CONT.c.name)
    )
    rows = union_all(parked.where(keys.c.key.is_not(None)), due).subquery("loads")
    now_served = _served(rows.c.version)
    advertised = (ADVERTISED.c.kind == _RESUME) & (ADVERTISED.c.key == rows.c.version)
    left = grace_left(func.max(ADVERTISED.c.last_seen_at), func.min(rows.c.since), func.bool_or(ADVERTISED.c.remote))
    columns = (func.sum(rows.c.parked), func.sum(rows.c.due), now_served, case((now_served, None), else_=left))
    return (
        select(rows.c.version, *columns)
        .select_from(rows.outerjoin(ADVERTISED, advertised))
        .group_by(rows.c.version)
        .order_by(rows.c.version)
    )


# ``VERSIONS``: the statement whose compiled text runs on psycopg too (models/fleet_sql.py).
__getattr__ = by_name(VERSIONS=_versions)


def versions(session: Session, *, grace_s: float) -> list[VersionLoad]:
    """Every continuation version that parked steps or due continuations need, by name, whether a live
    worker runs it, and if none does the time left of its grace of ``grace_s`` (``PARKWAY_VERSION_GRACE_S``).
    Counts every pending wait: for an operator's request, not for every scrape."""
    return [version_load(row) for row in session.execute(_versions(), {"grace": -grace_s})]


def unserved_versions(session: Session, run_id: str) -> list[str]:
    """The continuation versions the run's pending interactions resume that no live worker advertises now."""
    stmt = (
        select(_I.c.continuation)
        .distinct()
        .where(_I.c.run_id == run_id, _PENDING, _I.c.continuation.is_not(None), ~_served(_I.c.continuation))
        .order_by(_I.c.continuation)
    )
    return [str(key) for key in session.scalars(stmt)]
