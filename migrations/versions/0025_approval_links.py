"""approval links: one per person and wait, stored hashed, single-use (docs/teams.md "Approval links"); the
subscriptions that carry them (``webhooks.links``)

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-09 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "approval_links",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("interaction_id", sa.String(length=64), nullable=False),
        sa.Column("principal_id", sa.String(length=64), nullable=False),
        sa.Column("made_by_id", sa.String(length=64), nullable=True),
        sa.Column("webhook_id", sa.String(length=64), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("response_id", sa.String(length=200), nullable=True),
        sa.Column("justification", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["interaction_id"], ["interactions.id"], name=op.f("fk_approval_links_interaction_id_interactions")
        ),
        sa.ForeignKeyConstraint(
            ["principal_id"], ["principals.id"], name=op.f("fk_approval_links_principal_id_principals")
        ),
        sa.ForeignKeyConstraint(
            ["made_by_id"], ["principals.id"], name=op.f("fk_approval_links_made_by_id_principals")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approval_links")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_approval_links_token_hash")),
    )
    op.create_index("ix_approval_links_interaction", "approval_links", ["interaction_id", "principal_id"])
    op.add_column("webhooks", sa.Column("links", sa.Boolean(), server_default=sa.text("false"), nullable=False))


def downgrade() -> None:
    op.drop_column("webhooks", "links")
    op.drop_index("ix_approval_links_interaction", table_name="approval_links")
    op.drop_table("approval_links")
