"""The hot CLI commands import what they need, when they need it (issue 43 item 3: each answers in half a
second; importing the ORM, the settings library, Celery or the API alone costs more than that).

Each command runs in a fresh interpreter against a database that answers nowhere: it loads what it needs,
fails to connect (exit 2, "cannot reach the database"), and the modules it loaded by then are read at exit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What none of the four needs, each with what does.
HEAVY = {
    "pydantic_settings": "nothing: the settings are read by parkway.settings itself",
    "fastapi": "the API",
    "starlette": "the API",
    "uvicorn": "the API",
    "api": "the API",
    "alembic": "parkway migrate, or explaining a schema mismatch",
    "examples": "a worker (the workflow modules of PARKWAY_IMPORTS)",
    "jsonschema": "a worker or the API checking answers",
    "parkway.cli_up": "parkway up and parkway logs (the parser builds the command's own group alone)",
    "parkway.supervisor": "parkway up",
}
# What none but ``parkway run start`` needs: it publishes the run's first task.
BROKER = {
    "celery": "publishing a task (parkway run start)",
    "kombu": "publishing a task (parkway run start)",
    "redis": "the broker (parkway run start)",
}
# What the commands that make principals and grants and list the workers do without: they run the store's
# statements for them (models/principal_sql.py, models/fleet_sql.py) on plain psycopg. A run's start is still
# the store's on SQLAlchemy.
SQLALCHEMY = {"sqlalchemy": "the store's other statements"}
COMMANDS = {
    "token create": (["token", "create", "--kind", "agent", "--name", "probe"], HEAVY | BROKER | SQLALCHEMY),
    "grant create": (["grant", "create", "--principal", "probe", "--target", "t"], HEAVY | BROKER | SQLALCHEMY),
    "workers": (["workers"], HEAVY | BROKER | SQLALCHEMY),
    "run start": (["run", "start", "deploy.plan", "--as", "probe", "--target", "t"], HEAVY),
}

PROBE = """
import atexit, json, os, sys
atexit.register(lambda: open(os.environ["PROBE_OUT"], "w").write(json.dumps(sorted(sys.modules))))
from parkway.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_hot_command_imports_only_what_it_needs(command: str, tmp_path: Path) -> None:
    argv, forbidden = COMMANDS[command]
    out = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
    env.update(
        PARKWAY_DATABASE_URL="postgresql://parkway@127.0.0.1:1/unused",  # refused: nothing is written anywhere
        PARKWAY_SECRET_KEY="k" * 48,
        PARKWAY_IMPORTS="examples",
        PYTHONPATH=str(ROOT),
        PROBE_OUT=str(out),
    )
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "cannot reach the database" in done.stderr, done.stderr[-2000:]
    loaded = json.loads(out.read_text())
    found = {
        prefix: why
        for prefix, why in forbidden.items()
        if any(name == prefix or name.startswith(prefix + ".") for name in loaded)
    }
    assert not found, f"parkway {command} imports what only these need: {found}"
