"""a lease is its holder's: who holds each remote lease, the lease that journaled a tool call, and the
principal of a remote worker's advertisement

A worker leases only runs on targets it holds a live grant on (admins: any), and every call on a lease is
answered only for the principal that took it (docs/worker-protocol.md, "Who"): ``leases`` keeps that
principal by the whole lease id; ``tool_calls.journaled_by`` the lease whose outcome a call takes;
``workers.principal_id`` whom a remote worker's advertisement routes work to.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("continuation_id", sa.String(length=64), nullable=False),
        sa.Column("principal_id", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["continuation_id"], ["continuations.id"], name=op.f("fk_leases_continuation_id_continuations")
        ),
        sa.ForeignKeyConstraint(["principal_id"], ["principals.id"], name=op.f("fk_leases_principal_id_principals")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_leases")),
    )
    op.add_column("tool_calls", sa.Column("journaled_by", sa.String(length=64), nullable=True))
    op.add_column("workers", sa.Column("principal_id", sa.String(length=64), nullable=True))
    op.create_foreign_key(op.f("fk_workers_principal_id_principals"), "workers", "principals", ["principal_id"], ["id"])


def downgrade() -> None:
    op.drop_constraint(op.f("fk_workers_principal_id_principals"), "workers", type_="foreignkey")
    op.drop_column("workers", "principal_id")
    op.drop_column("tool_calls", "journaled_by")
    op.drop_table("leases")
