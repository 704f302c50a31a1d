"""ix_interactions_pending: the sweep finds the waits that can no longer make progress

A parked step whose continuation version is not registered, or whose run's owner lost its grant, is
interrupted by the sweep (sweep category 3), which reads the pending interactions through this partial
index: its size follows the open waits, not the table. An interaction's status change was never an
in-place (HOT) update (``ix_interactions_pending_expiry`` is partial on ``status``), so the index costs one
entry per interaction asked and nothing on its answer.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("interactions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_interactions_pending",
            ["step_id"],
            unique=False,
            postgresql_where=sa.text("status = 'pending'"),
            sqlite_where=sa.text("status = 'pending'"),
        )


def downgrade() -> None:
    with op.batch_alter_table("interactions", schema=None) as batch_op:
        batch_op.drop_index("ix_interactions_pending")
