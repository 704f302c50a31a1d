"""the waits escalated to a target, by that target: "escalated to a team I am granted on" in the listings
(docs/teams.md)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_interaction_answerers_target", "interaction_answerers", ["target"], unique=False,
                    postgresql_where=sa.text("target IS NOT NULL"))  # fmt: skip


def downgrade() -> None:
    op.drop_index("ix_interaction_answerers_target", table_name="interaction_answerers")
