"""push handlers: HTTP URLs that serve step names and continuation keys (docs/worker-protocol.md, "Push")

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04 22:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "push_handlers",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("serves", postgresql.ARRAY(sa.String(length=200)), nullable=False),
        sa.Column("secret_sealed", sa.Text(), nullable=False),
        sa.Column("attempts", sa.BigInteger(), nullable=False),
        sa.Column("failures", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_push_handlers")),
    )


def downgrade() -> None:
    op.drop_table("push_handlers")
