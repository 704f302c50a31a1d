"""the decision record: the auditor kind, the seals of the event log, the decided waits by when (docs/operations.md)

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KINDS = "kind IN ('agent', 'human', 'admin', 'worker'{})"
# The decision record's pages (models/decisions.py): all decided waits by when, and each target's.
DECIDED = {
    "ix_interactions_decided": ["closed_at", "id"],
    "ix_interactions_decided_target": ["target", "closed_at", "id"],
}


def upgrade() -> None:
    op.drop_constraint(op.f("ck_principals_kind"), "principals", type_="check")
    op.create_check_constraint(op.f("ck_principals_kind"), "principals", KINDS.format(", 'auditor'"))
    op.create_table(
        "seals",
        sa.Column("position", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("after_seq", sa.BigInteger(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("prev", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("signature", sa.String(length=128), nullable=False),
        sa.Column("entries", sa.JSON(), nullable=False),
        sa.Column("sealed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("position", name=op.f("pk_seals")),
        sa.UniqueConstraint("last_seq", name=op.f("uq_seals_last_seq")),
    )
    for name, columns in DECIDED.items():
        op.create_index(name, "interactions", columns, unique=False, postgresql_where=sa.text("closed_at IS NOT NULL"))


def downgrade() -> None:
    for name in DECIDED:
        op.drop_index(name, table_name="interactions")
    op.drop_table("seals")
    op.execute("DELETE FROM grants WHERE principal_id IN (SELECT id FROM principals WHERE kind = 'auditor')")
    op.execute("DELETE FROM principals WHERE kind = 'auditor'")  # an auditor writes nothing that names it
    op.drop_constraint(op.f("ck_principals_kind"), "principals", type_="check")
    op.create_check_constraint(op.f("ck_principals_kind"), "principals", KINDS.format(""))
