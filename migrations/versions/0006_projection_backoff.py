"""projections back off: runs.projection_attempts and runs.projection_next_at; the pending index by due time

A run whose projection write keeps failing (its workspace unwritable, say) was read first by every sweep
pass, ahead of every newer run: with a small batch it starved them. Each failed write now counts an
attempt and pushes ``projection_next_at`` out (exponential, capped); a success clears both. The partial
index ``ix_runs_projection_pending`` is keyed by when each pending projection is due,
``coalesce(projection_next_at, completed_at)``, so the sweep reads the due ones in that order, bounded by
its batch.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_runs_projection_pending"
WHERE = {"postgresql_where": sa.text("projection_pending"), "sqlite_where": sa.text("projection_pending = 1")}


def upgrade() -> None:
    # Plain operations, not a batch: SQLite adds the columns in place, and its batch mode (a table copy)
    # cannot carry an index on an expression.
    op.add_column("runs", sa.Column("projection_attempts", sa.Integer(), server_default=sa.text("0"), nullable=False))
    op.add_column("runs", sa.Column("projection_next_at", sa.DateTime(timezone=True), nullable=True))
    op.drop_index(INDEX, table_name="runs", **WHERE)
    op.create_index(INDEX, "runs", [sa.text("coalesce(projection_next_at, completed_at)")], unique=False, **WHERE)


def downgrade() -> None:
    op.drop_index(INDEX, table_name="runs", **WHERE)
    op.create_index(INDEX, "runs", ["completed_at"], unique=False, **WHERE)
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("projection_next_at")
        batch_op.drop_column("projection_attempts")
