"""A worker child holds what its parent imported before the fork (issue 42 item 5: its peak RSS): the Celery
app and the modules it names (``conf.imports``) must not pull in what only the API, the CLI or a sensitive
value needs. Read in a fresh interpreter, as ``celery worker`` loads them.

A process pays for the statements it runs, when it first runs them (issue 43 item 9): importing the store,
the API, the sweep and the Celery app builds no SQL statement and configures no ORM mapper."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# Each with what needs it: a worker meets none of them on a plain answer -> resume.
NOT_IN_A_WORKER = {
    "cryptography.fernet": "a sensitive value (parkway.crypto, when one is sealed or joined)",
    "cryptography.hazmat.bindings": "a sensitive value or a seal (parkway.crypto)",
    "fastapi": "the API",
    "starlette": "the API",
    "uvicorn": "the API",
    "jinja2": "the API's pages",
    "api": "the API",
    "parkway.cli": "the CLI",
}

PROBE = """
import importlib, json, sys
from tasks.celery_app import app
for name in app.conf.imports:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""


STATEMENTS_PROBE = """
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


def _probe(code: str) -> Any:
    """What ``code`` prints last, as JSON, run in a fresh interpreter that connects nowhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
    env.update(
        PARKWAY_DATABASE_URL="postgresql+psycopg://parkway@127.0.0.1:1/unused",  # imports connect nowhere
        PARKWAY_BROKER_URL="redis://127.0.0.1:1/0",
        PARKWAY_SECRET_KEY="k" * 48,
        PARKWAY_IMPORTS="",
        PYTHONPATH=str(ROOT),
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_worker_imports_nothing_it_does_not_need() -> None:
    loaded = _probe(PROBE)
    found = {
        prefix: why
        for prefix, why in NOT_IN_A_WORKER.items()
        if any(name == prefix or name.startswith(prefix + ".") for name in loaded)
    }
    assert not found, f"a worker imports what only these need: {found}"


def test_importing_the_store_and_the_api_builds_no_statement_and_configures_no_mapper() -> None:
    found = _probe(STATEMENTS_PROBE)
    assert found["built"] == [], "statements built at import (make each a functools.cache builder)"
    assert found["configured"] is False, "an ORM mapper configured at import (an aliased() or an ORM select)"
