"""room for in-place (HOT) updates of runs and steps; ix_runs_status dropped

A run row is written three or four times in its life and a step row two or three times. PostgreSQL can
update a row in place (a heap-only tuple: no new entry in any index) only when no indexed column changes
and the row's page has room. ``ix_runs_status`` made every status change an insert into all of the runs
table's indexes, and no query reads it (runs are read by id; the sweep finds its runs through other
indexes). A fillfactor of 80 leaves each new page a fifth free for the next versions of its rows.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 00:45:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FILLFACTOR = {"runs": 80, "steps": 80}


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_status"))
    if op.get_bind().dialect.name == "postgresql":
        for table, fill in FILLFACTOR.items():
            op.execute(f"ALTER TABLE {table} SET (fillfactor = {fill})")  # pages written from now on


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in FILLFACTOR:
            op.execute(f"ALTER TABLE {table} RESET (fillfactor)")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_status"), ["status"], unique=False)
