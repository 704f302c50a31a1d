"""events.seq ordered by writing transaction (PostgreSQL): readers deliver exactly, with no time horizon

A sequence hands out ``seq`` when a row is inserted, not when its transaction commits: a reader could
move its cursor past seq 11 while the transaction holding it was still open, and never deliver it. From
this revision ``seq`` is assigned by ``parkway_event_seq()``, the column's server default:

    seq = (top-level transaction id, pg_current_xact_id()) << 16 | n

where ``n`` = 1, 2, 3 … counts the events of that transaction (a transaction-local setting,
``parkway.event_n``). A transaction that writes more than 65535 events raises: two events never share a
``seq``. A reader then delivers only ``seq < pg_snapshot_xmin(pg_current_snapshot()) << 16`` (in the same
statement as the rows, so in the same snapshot): every transaction below its snapshot's ``xmin`` has
ended, and every transaction still open (or yet to start) has an id at or above it, so all its events,
present and future, sort above everything delivered. Exact, whatever the interleaving of writers; an open
writer only holds delivery back until it ends.

Rows already in the table keep their seqs. They came from the old sequence, one number per event
inserted, which is far below (current transaction id) << 16 unless transactions wrote tens of thousands
of events each: the old events sort below every new one and the log carries on in order (checked: the
upgrade refuses a table where this does not hold).

Magnitude: transaction ids count every writing transaction of the whole cluster (every database). ``seq``
stays below 2^53 (exact in a JavaScript number) while the cluster's transaction id is below 2^37, about
1.4·10^11: 4.4 years at a sustained 1,000 writing transactions per second, 44 years at 100 per second.
The API accepts cursors up to 2^62.

SQLite keeps its rowid sequence: it has one writer at a time, holding the write lock until it commits,
so its seqs are already in commit order. The models' column is unchanged (``migrations/env.py`` does not
compare server defaults); this default exists only in the database.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 12:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EVENT_SEQ = """
CREATE FUNCTION parkway_event_seq() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n integer := coalesce(nullif(current_setting('parkway.event_n', true), '')::integer, 0) + 1;
BEGIN
    IF n > 65535 THEN
        RAISE EXCEPTION 'transaction % writes more than 65535 events', pg_current_xact_id()
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    PERFORM set_config('parkway.event_n', n::text, true);
    RETURN (pg_current_xact_id()::text::bigint << 16) | n;
END
$$
"""

# Refuse to upgrade a database whose old seqs would not all sort below the new ones.
CHECK_OLD_SEQS = """
DO $$
BEGIN
    IF (SELECT coalesce(max(seq), 0) FROM events) >= (pg_current_xact_id()::text::bigint << 16) THEN
        RAISE EXCEPTION 'events.seq reaches past this transaction id << 16: new events would not sort last';
    END IF;
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(EVENT_SEQ)
    op.execute("LOCK TABLE events IN EXCLUSIVE MODE")  # no event is written between the check and the switch
    op.execute(CHECK_OLD_SEQS)
    op.execute("ALTER TABLE events ALTER COLUMN seq SET DEFAULT parkway_event_seq()")
    op.execute("DROP SEQUENCE IF EXISTS events_seq_seq")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE SEQUENCE events_seq_seq OWNED BY events.seq")
    op.execute("SELECT setval('events_seq_seq', coalesce((SELECT max(seq) FROM events), 0) + 1, false)")
    op.execute("ALTER TABLE events ALTER COLUMN seq SET DEFAULT nextval('events_seq_seq')")
    op.execute("DROP FUNCTION parkway_event_seq()")
