"""delegation moves a place, never adds one (docs/teams.md): the place each delegation moves, the place each
response was made in

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("interaction_answerers", sa.Column("place_id", sa.String(length=64), nullable=True))
    op.create_foreign_key(op.f("fk_interaction_answerers_place_id_principals"), "interaction_answerers",
                          "principals", ["place_id"], ["id"])  # fmt: skip
    # A delegation made before this revision moved nothing (its delegator kept access): it becomes the move
    # of its delegator's place.
    op.execute("UPDATE interaction_answerers SET place_id = by_id WHERE source = 'delegate'")
    op.add_column("interaction_responses", sa.Column("place_id", sa.String(length=64), nullable=True))
    op.execute("UPDATE interaction_responses SET place_id = principal_id")  # each was its principal's own
    op.alter_column("interaction_responses", "place_id", nullable=False)
    op.create_foreign_key(op.f("fk_interaction_responses_place_id_principals"), "interaction_responses",
                          "principals", ["place_id"], ["id"])  # fmt: skip
    op.create_unique_constraint(op.f("uq_interaction_responses_interaction_id_place_id"), "interaction_responses",
                                ["interaction_id", "place_id"])  # fmt: skip


def downgrade() -> None:
    op.drop_constraint(op.f("uq_interaction_responses_interaction_id_place_id"), "interaction_responses")
    op.drop_constraint(op.f("fk_interaction_responses_place_id_principals"), "interaction_responses")
    op.drop_column("interaction_responses", "place_id")
    op.drop_constraint(op.f("fk_interaction_answerers_place_id_principals"), "interaction_answerers")
    op.drop_column("interaction_answerers", "place_id")
