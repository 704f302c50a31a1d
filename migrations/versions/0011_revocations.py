"""a revoked grant is the sweep's queue of waits to end; an owner's live runs by target

The sweep used to find the waits whose run's owner lost its grant by walking every pending wait on every
pass. A revoked grant now stays in ``ix_grants_unswept`` until the sweep has ended the waits it took the
authority of (``grants.swept_at``), and those are found through ``ix_runs_live_owner`` (an owner's runs on
a target that have not ended): a pass with no revocation reads an empty index, one with a revocation
reads that owner's live runs on that target. Grants revoked before this revision are swept once too.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 19:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("grants", sa.Column("swept_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_grants_unswept",
        "grants",
        ["revoked_at"],
        unique=False,
        postgresql_where=sa.text("revoked_at IS NOT NULL AND swept_at IS NULL"),
    )
    op.create_index(
        "ix_runs_live_owner",
        "runs",
        ["owner_id", "target"],
        unique=False,
        postgresql_where=sa.text("completed_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_live_owner", table_name="runs")
    op.drop_index("ix_grants_unswept", table_name="grants")
    op.drop_column("grants", "swept_at")
