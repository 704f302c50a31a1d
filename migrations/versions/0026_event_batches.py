"""events stored as one row per writing statement and run (``event_batches``); ``events`` a view of one row
per event, as before (issue 42: a completion wrote five event rows, now two)

A batch row holds the events one statement writes for one run, in order: ``first_seq`` the ``seq`` of its
first, the others the next numbers (``seq`` is still the writing transaction's id << 16 | its n-th event,
migration 0004: ``parkway_event_seqs(k)`` takes k of them at once), ``events`` a JSON array of ``{type,
data}``, ``at`` and ``trace_id`` shared by them. The view ``events`` unnests it: readers see every event with
its own ``seq``, ``run_id, type, at, data, trace_id``, the same as the table gave, and ``batch_seq`` (the
batch's ``first_seq``) to bound their range with an index (models/event_reads.py).

Live: the table ``events`` is renamed and two nullable columns are added, all catalog changes: no row is
rewritten, so this takes the same short ACCESS EXCLUSIVE lock whatever the log's size, waiting at most
``lock_timeout`` (1 s) for writers to let go, else failing, changing nothing, to be run again. Rows written
before keep their one event in ``type`` and ``data`` (``events`` NULL), and read through the view as they
did. Writes through the view (an operator's repair; tests that tamper with the log) still work, one event
at a time: ``parkway_events_write`` first splits the batch it touches into one row per event.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07 09:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EVENT_SEQS = """
CREATE FUNCTION parkway_event_seqs(k integer) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n integer := coalesce(nullif(current_setting('parkway.event_n', true), '')::integer, 0);
BEGIN
    IF n + k > 65535 THEN
        RAISE EXCEPTION 'transaction % writes more than 65535 events', pg_current_xact_id()
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    PERFORM set_config('parkway.event_n', (n + k)::text, true);
    RETURN (pg_current_xact_id()::text::bigint << 16) | (n + 1);
END
$$
"""

EVENTS_VIEW = """
CREATE VIEW events AS
SELECT b.first_seq + e.n - 1 AS seq, b.run_id, (e.x ->> 'type')::varchar(64) AS type, b.at, e.x -> 'data' AS data,
       b.trace_id, b.first_seq AS batch_seq
FROM event_batches AS b
CROSS JOIN LATERAL json_array_elements(
    coalesce(b.events, json_build_array(json_build_object('type', b.type, 'data', b.data)))
) WITH ORDINALITY AS e(x, n)
"""

# An insert through the view is a batch of one; an update or a delete first splits the event's batch into
# rows of one event each (the form of rows written before 0026), then changes that row alone.
EVENTS_WRITE = """
CREATE FUNCTION parkway_events_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    b event_batches;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM event_batches WHERE first_seq = OLD.batch_seq AND events IS NOT NULL RETURNING * INTO b;
        IF FOUND THEN
            INSERT INTO event_batches (first_seq, run_id, type, at, data, trace_id)
            SELECT b.first_seq + t.n - 1, b.run_id, t.x ->> 'type', b.at, t.x -> 'data', b.trace_id
            FROM json_array_elements(b.events) WITH ORDINALITY AS t(x, n);
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        DELETE FROM event_batches WHERE first_seq = OLD.seq;
        RETURN OLD;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        UPDATE event_batches SET first_seq = NEW.seq, run_id = NEW.run_id, type = NEW.type, at = NEW.at,
            data = NEW.data, trace_id = NEW.trace_id
        WHERE first_seq = OLD.seq;
        RETURN NEW;
    END IF;
    NEW.seq := coalesce(NEW.seq, parkway_event_seqs(1));
    NEW.batch_seq := NEW.seq;
    INSERT INTO event_batches (first_seq, run_id, type, at, data, trace_id)
    VALUES (NEW.seq, NEW.run_id, NEW.type, coalesce(NEW.at, now()), NEW.data, NEW.trace_id);
    RETURN NEW;
END
$$
"""

EVENTS_TRIGGER = """
CREATE TRIGGER events_write INSTEAD OF INSERT OR UPDATE OR DELETE ON events
FOR EACH ROW EXECUTE FUNCTION parkway_events_write()
"""

# Every batch back to rows of one event each, as the table ``events`` held them.
SPLIT_BATCHES = """
WITH gone AS (DELETE FROM event_batches WHERE events IS NOT NULL RETURNING *)
INSERT INTO event_batches (first_seq, run_id, type, at, data, trace_id)
SELECT gone.first_seq + t.n - 1, gone.run_id, t.x ->> 'type', gone.at, t.x -> 'data', gone.trace_id
FROM gone CROSS JOIN LATERAL json_array_elements(gone.events) WITH ORDINALITY AS t(x, n)
"""


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")
    op.execute("ALTER TABLE events RENAME TO event_batches")
    op.execute("ALTER TABLE event_batches RENAME COLUMN seq TO first_seq")
    op.execute("ALTER TABLE event_batches RENAME CONSTRAINT pk_events TO pk_event_batches")
    op.execute("ALTER TABLE event_batches ALTER COLUMN first_seq DROP DEFAULT")
    op.execute("ALTER TABLE event_batches ALTER COLUMN type DROP NOT NULL, ALTER COLUMN data DROP NOT NULL")
    op.execute("ALTER TABLE event_batches ADD COLUMN events json")
    op.execute(EVENT_SEQS)
    op.execute(EVENTS_VIEW)
    op.execute(EVENTS_WRITE)
    op.execute(EVENTS_TRIGGER)


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")
    op.execute("DROP VIEW events")
    op.execute("DROP FUNCTION parkway_events_write()")
    op.execute(SPLIT_BATCHES)
    op.execute("DROP FUNCTION parkway_event_seqs(integer)")
    op.execute("ALTER TABLE event_batches DROP COLUMN events")
    op.execute("ALTER TABLE event_batches ALTER COLUMN type SET NOT NULL, ALTER COLUMN data SET NOT NULL")
    op.execute("ALTER TABLE event_batches ALTER COLUMN first_seq SET DEFAULT parkway_event_seq()")
    op.execute("ALTER TABLE event_batches RENAME CONSTRAINT pk_event_batches TO pk_events")
    op.execute("ALTER TABLE event_batches RENAME COLUMN first_seq TO seq")
    op.execute("ALTER TABLE event_batches RENAME TO events")
