"""A process pays for the statements it runs, when it first runs them (issue 43 item 9): importing the store,
the API, the sweep and the Celery app builds no SQL statement and configures no ORM mapper. Read in a fresh
interpreter, as a worker, an API server or a ``parkway`` command starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json
import models.store.exports, api.app, beat.sweep, tasks.celery_app
from sqlalchemy import inspect
from sqlalchemy.sql.dml import Delete, Insert, Update
from sqlalchemy.sql.selectable import CompoundSelect, Select
from models.tables import Run
kinds = (Select, CompoundSelect, Update, Insert, Delete)
built = [str(o).split(chr(10))[0] for o in gc.get_objects() if isinstance(o, kinds)]
print(json.dumps({"configured": inspect(Run).configured, "built": built}))
"""


def _imported() -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
    env.update(
        PARKWAY_DATABASE_URL="postgresql+psycopg://parkway@127.0.0.1:1/unused",  # imports connect nowhere
        PARKWAY_BROKER_URL="redis://127.0.0.1:1/0",
        PARKWAY_SECRET_KEY="k" * 48,
        PARKWAY_IMPORTS="",
        PYTHONPATH=str(ROOT),
    )
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_importing_the_store_and_the_api_builds_no_statement_and_configures_no_mapper() -> None:
    found = _imported()
    assert found["built"] == [], "statements built at import (make each a functools.cache builder)"
    assert found["configured"] is False, "an ORM mapper configured at import (an aliased() or an ORM select)"
