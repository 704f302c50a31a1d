"""One meaning of served (SPEC §6, category 3), as SQL every reader of the fleet shares: the store's
routing and hand-on (``models.store.workers``), the sweep's fail-closed (``models.fail_closed``) and what
operators see (``models.fleet``).

- A key is **served** while a live worker advertises it: a worker row whose heartbeat (``expires_at``) is
  ahead of the database's clock, a Celery worker's, a remote worker's (its lease calls are its heartbeats) or
  a push handler's.
- A **fleet** is the Celery workers, or the remote workers (whose lease calls come through the API). Each
  advertisement stamps its fleet's presence (``fleet_presence``): present until its expiry, and ``up_since``
  set anew when it finds the fleet absent; the API's own heartbeat stamps the remote fleet's (a remote
  key's grace counts from max(its last lease call, the API's return)). A push handler's row stamps none: it
  is live by its own record of success (``models.store.push``).
- A key's **grace** (``grace_over``, ``grace_left``) counts from ``grace_from``: the later of its last
  advertisement (or, never advertised, when the work began waiting) and when the fleet that last advertised
  it came back. While that fleet is absent the grace does not count at all; so after an outage of every
  worker (or of the API, for remote workers) each version gets a fresh grace from the fleet's return.
- What operators see (``GET /v1/workers``): each live row's kind (``kind_of``), and each unserved version's
  ``grace_left``.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table, any_, case, func, literal, literal_column, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from models.clock import db_now
from models.fleet_tables import AdvertisedVersion, FleetPresence, Worker
from models.status import ContinuationKind

WORKERS = cast(Table, Worker.__table__)
ADVERTISED = cast(Table, AdvertisedVersion.__table__)
PRESENCE = cast(Table, FleetPresence.__table__)
CELERY, REMOTE = "celery", "remote"  # the fleets
PUSH = "push"  # the kind of a push handler's row, of no fleet
PUSH_NODE = "push:"  # the node name of a push handler's row: push:<id> (models/store/push.py)


def live() -> Any:
    """A worker whose heartbeat has not run out by the database's clock."""
    return WORKERS.c.expires_at > db_now()


def advertises(kind: Any, key: Any) -> Any:
    """The worker row advertises ``key`` (an expression) as a step (``start``) or a continuation (``resume``);
    ``kind`` a word, or a column of them (a continuation's)."""
    if isinstance(kind, str):
        return key == any_(WORKERS.c.steps if kind == ContinuationKind.START else WORKERS.c.continuations)
    return case((kind == ContinuationKind.START.value, key == any_(WORKERS.c.steps)),
                else_=key == any_(WORKERS.c.continuations))  # fmt: skip


def served(kind: Any, key: Any, *where: Any) -> Any:
    """A live worker (of those ``where`` picks) advertises ``key`` now."""
    return select(WORKERS.c.id).where(live(), advertises(kind, key), *where).exists()


def fleet_of(remote: bool) -> str:
    return REMOTE if remote else CELERY


def kind_of() -> Any:
    """The kind of worker a row is: ``celery``, ``remote`` or ``push`` (a push handler's)."""
    return case((WORKERS.c.node.startswith(PUSH_NODE), literal(PUSH)), (WORKERS.c.remote, literal(REMOTE)),
                else_=literal(CELERY))  # fmt: skip


def stamp_presence(fleet: Any, expires_at: Any, *where: Any) -> Any:
    """absent|present -> present until ``expires_at`` (a column of a CTE: one row each) for ``fleet``, where
    ``where`` holds; ``up_since`` -> now only when the fleet was absent (its last presence ran out before now)."""
    row = pg_insert(PRESENCE).from_select(
        ["fleet", "up_since", "seen_until"], select(fleet, db_now(), expires_at).where(*where)
    )
    back = case((PRESENCE.c.seen_until < db_now(), db_now()), else_=PRESENCE.c.up_since)
    return row.on_conflict_do_update(
        index_elements=[PRESENCE.c.fleet],
        set_={"up_since": back, "seen_until": func.greatest(PRESENCE.c.seen_until, row.excluded.seen_until)},
    )


def api_presence() -> Any:
    """The API's heartbeat: the remote fleet present for ``:ttl_s`` more seconds (its workers reach Parkway
    only through the API, so the API's absence is theirs)."""
    return stamp_presence(literal(REMOTE), db_now("ttl_s"))


def presence_left(fleet: str) -> Any:
    """present -> present until the latest expiry of ``fleet``'s live workers, or absent now when none is
    left: a warm stop of its last worker ends the fleet's presence at once."""
    ours = WORKERS.c.remote if fleet == REMOTE else ~WORKERS.c.remote
    latest = select(func.max(WORKERS.c.expires_at)).where(live(), ours, ~WORKERS.c.node.startswith(PUSH_NODE))
    until = func.coalesce(latest.scalar_subquery(), db_now())
    return update(PRESENCE).where(PRESENCE.c.fleet == fleet, PRESENCE.c.seen_until > until).values(seen_until=until)


def fleet_up_since(remote: Any) -> Any:
    """When the fleet that last advertised a key (``remote``: a boolean expression; NULL: none ever did, then
    any fleet) came back, if it is present now; NULL while it is absent."""
    fleet = case((remote, literal(REMOTE)), else_=literal(CELERY))
    present = select(func.max(PRESENCE.c.up_since)).where(
        PRESENCE.c.seen_until > db_now(), or_(remote.is_(None), PRESENCE.c.fleet == fleet)
    )
    return present.scalar_subquery()


def grace_from(last_seen: Any, since: Any, remote: Any) -> Any:
    """Where a key's grace counts from: the later of its last advertisement ``last_seen`` (NULL: never;
    then ``since``, when the work began waiting) and its fleet's return; NULL while its fleet is absent
    (the grace does not count)."""
    up = fleet_up_since(remote)
    return case((up.is_(None), None), else_=func.greatest(func.coalesce(last_seen, since), up))


_NEVER: Any = literal_column("'-infinity'::timestamptz")


def grace_over(last_seen: Any, remote: Any) -> Any:
    """A key's grace of ``:grace`` seconds (bound negative, as ``db_now`` adds it) ran out: its last
    advertisement and its fleet's return both before that (``grace_from``). A key never advertised counts
    from its fleet's return alone here: whoever asks bounds each wait by its own start too."""
    return grace_from(last_seen, _NEVER, remote) < db_now("grace")


def grace_left(last_seen: Any, since: Any, remote: Any) -> Any:
    """Seconds left of a key's grace of ``:grace`` seconds (bound negative), from ``grace_from``: 0 once it
    ran out, NULL while its fleet is absent (the grace does not count)."""
    left = func.extract("epoch", grace_from(last_seen, since, remote) - db_now("grace"))
    return case((left < 0, 0), else_=left)  # not GREATEST, which would make NULL 0
