"""one meaning of served: a grace counts only time the fleet was up

``fleet_presence`` records, per fleet (Celery workers; remote workers, through the API), when it last came
back after an absence and until when it is present; ``advertised_versions.remote`` whose fleet last
advertised a key, so its grace counts from max(its last advertisement, that fleet's return)
(models/served.py, docs/operations.md "Rolling deploys").

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-08 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_presence",
        sa.Column("fleet", sa.String(length=16), nullable=False),
        sa.Column("up_since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_until", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("fleet", name=op.f("pk_fleet_presence")),
    )
    op.add_column(
        "advertised_versions", sa.Column("remote", sa.Boolean(), server_default=sa.text("false"), nullable=False)
    )


def downgrade() -> None:
    op.drop_column("advertised_versions", "remote")
    op.drop_table("fleet_presence")
