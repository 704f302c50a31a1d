"""principals can be disabled and their tokens rotated; Decisions sessions live on the server

``principals.disabled_at`` marks a disabled principal (its name stays taken, its token hash is cleared);
``principals.token_generation`` counts its tokens, so rotating or disabling ends every session made with
an earlier one. ``page_sessions`` holds the Decisions page's sessions: the SHA-256 of a random id (the
cookie holds the id, never the bearer token), bound to the principal and the token generation it was
made with.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("token_generation", sa.Integer(), server_default="0", nullable=False))
    op.create_table(
        "page_sessions",
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("principal_id", sa.String(length=64), nullable=False),
        sa.Column("token_generation", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["principal_id"], ["principals.id"], name=op.f("fk_page_sessions_principal_id_principals")
        ),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_page_sessions")),
    )
    with op.batch_alter_table("page_sessions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_page_sessions_open",
            ["principal_id"],
            unique=False,
            postgresql_where=sa.text("ended_at IS NULL"),
            sqlite_where=sa.text("ended_at IS NULL"),
        )


def downgrade() -> None:
    with op.batch_alter_table("page_sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_page_sessions_open")
    op.drop_table("page_sessions")
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.drop_column("token_generation")
        batch_op.drop_column("disabled_at")
