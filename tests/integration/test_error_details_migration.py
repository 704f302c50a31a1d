"""Migration 0007: the details old code stored in a failed run's ``result`` move to ``error_details``."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from models.base import utcnow
from parkway.db import get_engine, reset_engine
from parkway.migrate import alembic_config

RUNS = sa.table(
    "runs",
    *(sa.column(name) for name in ("id", "workflow", "status", "owner_id", "target", "created_at", "updated_at")),
    sa.column("payload", sa.JSON),
    sa.column("result", sa.JSON),
    sa.column("projection_pending", sa.Boolean),
)
PRINCIPALS = sa.table("principals", *(sa.column(name) for name in ("id", "kind", "name", "created_at")))

OLD_RESULTS = {
    "failed-with-details": ("failed", {"details": {"code": 3}}),
    "legacy-error-word": ("error", {"details": [1, 2]}),
    "failed-without-details": ("failed", None),
    "completed": ("completed", {"details": "a completed run's own result keeps its shape"}),
}


def test_migration_0007__moves_failed_runs_details_out_of_their_result(fresh_db: str) -> None:
    # Given runs as the code before 0007 stored them
    config = alembic_config()
    command.downgrade(config, "0003")
    reset_engine()
    now = utcnow()
    with get_engine().begin() as conn:
        conn.execute(PRINCIPALS.insert().values(id="p1", kind="agent", name="old-bot", created_at=now))
        for run_id, (status, result) in OLD_RESULTS.items():
            conn.execute(
                RUNS.insert().values(
                    id=run_id, workflow="w", status=status, owner_id="p1", target="t", payload={}, result=result,
                    created_at=now, updated_at=now, projection_pending=False,
                )
            )  # fmt: skip
    # When the database is migrated
    command.upgrade(config, "head")
    reset_engine()
    # Then a failed run's details are its error_details, and its result is null; a completed run is untouched
    with get_engine().connect() as conn:
        rows = conn.execute(sa.text("SELECT id, result, error_details FROM runs")).all()
    found = {row.id: (_json(row.result), _json(row.error_details)) for row in rows}
    assert found == {
        "failed-with-details": (None, {"code": 3}),
        "legacy-error-word": (None, [1, 2]),
        "failed-without-details": (None, None),
        "completed": ({"details": "a completed run's own result keeps its shape"}, None),
    }


def _json(value: object) -> object:
    import json

    return json.loads(value) if isinstance(value, str) else value
