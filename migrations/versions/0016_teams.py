"""approvals as teams make them: quorum, named approvers, reminders, escalation, delegation (docs/teams.md)

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04 22:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PENDING_AND = "status = 'pending' AND {} IS NOT NULL"


def upgrade() -> None:
    # Constant defaults: no table rewrite (PostgreSQL 11+); a wait with none of the options is as before.
    op.add_column("interactions", sa.Column("quorum", sa.Integer(), server_default=sa.text("1"), nullable=False))
    op.add_column("interactions", sa.Column("team", sa.JSON(), nullable=True))
    op.add_column("interactions", sa.Column("level", sa.Integer(), server_default=sa.text("0"), nullable=False))
    op.add_column("interactions", sa.Column("answered_level", sa.Integer(), nullable=True))
    op.add_column("interactions", sa.Column("reminders", sa.Integer(), server_default=sa.text("0"), nullable=False))
    op.add_column("interactions", sa.Column("remind_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("interactions", sa.Column("escalate_at", sa.DateTime(timezone=True), nullable=True))
    for column in ("remind_at", "escalate_at"):
        op.create_index(f"ix_interactions_pending_{column}", "interactions", [column], unique=False,
                        postgresql_where=sa.text(_PENDING_AND.format(column)))  # fmt: skip
    op.create_table(
        "interaction_responses",
        sa.Column("interaction_id", sa.String(length=64), nullable=False),
        sa.Column("principal_id", sa.String(length=64), nullable=False),
        sa.Column("response_id", sa.String(length=200), nullable=False),
        sa.Column("response_digest", sa.String(length=64), nullable=False),
        sa.Column("value", sa.JSON(), nullable=True),
        sa.Column("approved", sa.Boolean(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "status IN ('pending', 'answered', 'rejected', 'canceled', 'expired', 'interrupted')",
            name=op.f("ck_interaction_responses_status"),
        ),
        sa.ForeignKeyConstraint(["interaction_id"], ["interactions.id"],
                                name=op.f("fk_interaction_responses_interaction_id_interactions")),
        sa.ForeignKeyConstraint(["principal_id"], ["principals.id"],
                                name=op.f("fk_interaction_responses_principal_id_principals")),
        sa.PrimaryKeyConstraint("interaction_id", "principal_id", name=op.f("pk_interaction_responses")),
    )  # fmt: skip
    op.create_table(
        "interaction_answerers",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("interaction_id", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("principal_id", sa.String(length=64), nullable=True),
        sa.Column("target", sa.String(length=200), nullable=True),
        sa.Column("by_id", sa.String(length=64), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("source IN ('assignee', 'escalation', 'delegate')",
                           name=op.f("ck_interaction_answerers_source")),
        sa.ForeignKeyConstraint(["interaction_id"], ["interactions.id"],
                                name=op.f("fk_interaction_answerers_interaction_id_interactions")),
        sa.ForeignKeyConstraint(["principal_id"], ["principals.id"],
                                name=op.f("fk_interaction_answerers_principal_id_principals")),
        sa.ForeignKeyConstraint(["by_id"], ["principals.id"], name=op.f("fk_interaction_answerers_by_id_principals")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_interaction_answerers")),
    )  # fmt: skip
    op.create_index("ix_interaction_answerers_interaction", "interaction_answerers", ["interaction_id"], unique=False)
    op.create_index("ix_interaction_answerers_principal", "interaction_answerers", ["principal_id"], unique=False,
                    postgresql_where=sa.text("principal_id IS NOT NULL"))  # fmt: skip


def downgrade() -> None:
    op.drop_table("interaction_answerers")
    op.drop_table("interaction_responses")
    for column in ("remind_at", "escalate_at"):
        op.drop_index(f"ix_interactions_pending_{column}", table_name="interactions")
    for column in ("escalate_at", "remind_at", "reminders", "answered_level", "level", "team", "quorum"):
        op.drop_column("interactions", column)
