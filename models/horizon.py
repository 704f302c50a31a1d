"""The horizon of the event log: the ``seq`` below which every event is final. Its own module so the store
(webhook cursors) and the readers (``models.event_log``) share one definition without an import cycle."""

from __future__ import annotations

from sqlalchemy import BigInteger, ColumnElement, literal_column

# The oldest transaction still open that may write events here: a transaction id of the statement's
# snapshot still in progress, unless pg_stat_activity shows it is another database's (ids are cluster-wide;
# another application's long transaction must not hold this stream back); the snapshot's xmax if none.
_OLDEST_LOCAL_WRITER = """(SELECT coalesce(
    (SELECT min(xip::text::bigint) FROM pg_snapshot_xip(s.snap) AS xip
     WHERE xip::text::bigint % 4294967296 NOT IN (
       SELECT a.backend_xid::text::bigint FROM pg_stat_activity AS a
       WHERE a.backend_xid IS NOT NULL AND a.datid IS NOT NULL AND a.datname <> current_database())),
    pg_snapshot_xmax(s.snap)::text::bigint)
  FROM (SELECT pg_current_snapshot() AS snap) AS s)"""


def final_below() -> ColumnElement[int]:
    """SQL: the ``seq`` below which every event is final, read in the snapshot of the statement using it.

    An event's ``seq`` is its writing transaction's id << 16 | n (migration 0004). Every transaction of
    this database below the oldest one still open has ended, and every one still open, or yet to start,
    has an id at or above it: an event not committed yet (or not written yet) always sorts above this bound.
    A transaction that ended after the snapshot was taken counts as open (it may be this database's), so
    the bound is not monotonic between statements: a reader keeps its own cursor (``visible_events``).
    """
    return literal_column(f"({_OLDEST_LOCAL_WRITER} << 16)", BigInteger())
