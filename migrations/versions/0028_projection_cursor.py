"""projections off the hot path (issue 42): a cursor over terminal runs instead of a flag cleared per run;
``schedule_history`` a view of the terminal runs instead of a row written per completion

``projection_cursor`` is one row: every terminal run whose event batches all sort below ``position`` has its
``run_metadata.json`` written, or its failure recorded on its row (``runs.projection_pending``, now set only
by a failed write, with ``projection_attempts`` and ``projection_next_at`` as before). A run is pending while
it is terminal and either has a batch at or above the cursor or has a failure recorded (models/projections.py).
Its first position is this transaction's first ``seq``: a run that ended before this revision (its
code set the flag with every terminal record) is pending exactly when its flag says so, and the sweep's
retry pass converges those, as it did; every run that ends after it is the cursor's.

``schedule_history`` becomes a view of ``runs`` with the columns readers used: it agrees with the canonical
record by construction. Its rows are dropped (each was a projection of its run's terminal record, which
the view now shows; a stale one is what the view makes impossible).

Live: a new table of one row, a view, and the old table dropped: catalog changes, no row of ``runs`` or the
log rewritten or scanned. The drop takes ``schedule_history``'s ACCESS EXCLUSIVE lock (only a terminal
commit writes it), waiting at most ``lock_timeout`` (1 s), else failing, changing nothing, to be run again.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07 16:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TERMINAL = "('completed', 'failed', 'canceled', 'interrupted')"

HISTORY_VIEW = f"""
CREATE VIEW schedule_history AS
SELECT id AS run_id, workflow, status, completed_at, finished_by AS execution_id, completed_at AS recorded_at
FROM runs WHERE completed_at IS NOT NULL AND status IN {TERMINAL}
"""


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")
    op.create_table(
        "projection_cursor",
        sa.Column("id", sa.SmallInteger(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("moved_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_projection_cursor")),
    )
    # Below every event a transaction after this one writes (seq = transaction id << 16 | n, migration 0004).
    op.execute(
        "INSERT INTO projection_cursor (id, position, moved_at)"
        " VALUES (1, pg_current_xact_id()::text::bigint << 16, now())"
    )
    op.drop_table("schedule_history")
    op.execute(HISTORY_VIEW)


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")
    op.execute("DROP VIEW schedule_history")
    # The table as 0027 had it (0001, the check of 0009, no foreign key since 0023).
    op.execute(
        "CREATE TABLE schedule_history (run_id varchar(64) NOT NULL, workflow varchar(200) NOT NULL,"
        " status varchar(16) NOT NULL, completed_at timestamptz NOT NULL, execution_id varchar(64) NOT NULL,"
        " recorded_at timestamptz NOT NULL, CONSTRAINT pk_schedule_history PRIMARY KEY (run_id),"
        f" CONSTRAINT ck_schedule_history_status CHECK (status IN {TERMINAL}))"
    )
    # The runs past the cursor are pending again as 0027 knows it: its sweep writes their files and rows.
    op.execute(
        "UPDATE runs SET projection_pending = true WHERE completed_at IS NOT NULL AND EXISTS ("
        "SELECT 1 FROM event_batches AS b WHERE b.run_id = runs.id"
        " AND b.first_seq >= (SELECT position FROM projection_cursor))"
    )
    op.execute(
        "INSERT INTO schedule_history (run_id, workflow, status, completed_at, execution_id, recorded_at) "
        "SELECT id, workflow, status, completed_at, finished_by, completed_at FROM runs "
        f"WHERE completed_at IS NOT NULL AND finished_by IS NOT NULL AND status IN {TERMINAL}"
        " AND NOT projection_pending"
    )
    op.drop_table("projection_cursor")
