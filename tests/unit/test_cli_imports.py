"""The hot CLI commands import what they need, when they need it (issue 43 item 3: each answers in half a
second; importing the ORM, the settings library, Celery or the API alone costs more than that).

Each command runs in a fresh interpreter against a database that answers nowhere: it loads what it needs,
fails to connect (exit 2, "cannot reach the database"), and the modules it loaded by then are read at exit.
``parkway run start`` is read once more as it stores a run: it imports the workflow modules (to check the
payload against what the step declares), and still neither the store, SQLAlchemy nor a broker client.
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
# What none of them needs: not even ``parkway run start`` publishes a task (a worker publishes the run's first
# continuation when the start's NOTIFY wakes it: tasks/ready.py).
BROKER = {
    "celery": "publishing a task",
    "kombu": "publishing a task",
    "redis": "the broker",
}
# What they do without: they run the store's statements for them (models/principal_sql.py, models/fleet_sql.py,
# models/start_sql.py) on plain psycopg.
SQLALCHEMY = {
    "sqlalchemy": "the store's other statements",
    "models.store": "the store's other transitions",
    "tasks.sdk_calls": "starting a run from Python (the SDK's running half)",
}
QUICK = HEAVY | BROKER | SQLALCHEMY
COMMANDS = {
    "token create": ["token", "create", "--kind", "agent", "--name", "probe"],
    "grant create": ["grant", "create", "--principal", "probe", "--target", "t"],
    "workers": ["workers"],
    "run start": ["run", "start", "deploy.plan", "--as", "probe", "--target", "t"],
}

PROBE = """
import atexit, json, os, sys
atexit.register(lambda: open(os.environ["PROBE_OUT"], "w").write(json.dumps(sorted(sys.modules))))
from parkway.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def loaded_by(argv: list[str], database_url: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``parkway *argv`` in a fresh interpreter, and the modules it had loaded when it exited."""
    out = cwd / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
    env.update(
        PARKWAY_DATABASE_URL=database_url,
        PARKWAY_SECRET_KEY="k" * 48,
        PARKWAY_IMPORTS="examples",
        PYTHONPATH=str(ROOT),
        PROBE_OUT=str(out),
    )
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    return done, json.loads(out.read_text())


def imported(loaded: list[str], forbidden: dict[str, str]) -> dict[str, str]:
    return {
        prefix: why
        for prefix, why in forbidden.items()
        if any(name == prefix or name.startswith(prefix + ".") for name in loaded)
    }


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_hot_command_imports_only_what_it_needs(command: str, tmp_path: Path) -> None:
    unreachable = "postgresql://parkway@127.0.0.1:1/unused"  # refused: nothing is written anywhere
    done, loaded = loaded_by(COMMANDS[command], unreachable, tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "cannot reach the database" in done.stderr, done.stderr[-2000:]
    found = imported(loaded, QUICK)
    assert not found, f"parkway {command} imports what only these need: {found}"


def test_run_start__stores_a_run_with_its_workflows_imported_and_neither_the_store_nor_a_broker(
    fresh_db: str, tmp_path: Path
) -> None:
    from models import principal_sql
    from models import store as store_
    from parkway import pgconn
    from parkway.db import single_statement

    with pgconn.transaction() as conn:  # an agent granted on t, and a live worker that runs deploy.plan
        agent = principal_sql.create_principal(conn.execute, kind="agent", name="probe", token_hash=None)
        assert agent is not None
        principal_sql.create_grant(conn.execute, principal_id=agent, target="t")
    advert = store_.Advert(id=store_.new_id(), node="probe@host", pid=1, steps=("deploy.plan",), continuations=(),
                           ttl_s=600)  # fmt: skip
    with single_statement() as conn:
        store_.advertise(conn, advert)
    argv = [*COMMANDS["run start"], "--payload", '{"service": "billing"}']
    done, loaded = loaded_by(argv, fresh_db, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "examples.deploy" in loaded  # the payload was checked against the step's model
    found = imported(loaded, {prefix: why for prefix, why in QUICK.items() if prefix != "examples"})
    assert not found, f"parkway run start imports what only these need: {found}"
    with pgconn.transaction() as conn:
        row = conn.execute("SELECT workflow, payload FROM runs WHERE id = %(id)s", {"id": done.stdout.strip()})
        assert row.fetchone() == ("deploy.plan", {"service": "billing"})
