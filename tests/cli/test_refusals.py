"""What a user sees when Parkway cannot start as configured: one line naming what to fix, never a traceback
of ours (uvicorn adds its lifespan traceback after the API's line). ``parkway migrate`` says what it did on
stdout; every command that uses the database says it cannot be reached, with the URL's password hidden;
migrate refuses a secret key the other processes would refuse; an invalid setting and a workflow module
that is not there stop migrate, the worker, beat and the API."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import initialized_home
from tests.cli.support import embedded_env, free_port, parkway

SECRET = "migrate-test-secret-" + "k" * 32


def test_migrate__says_what_it_did_on_stdout(home: Path) -> None:
    done = parkway("migrate", env=embedded_env(PARKWAY_HOME=str(home)), cwd=home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("parkway migrate: "), (done.stdout, done.stderr)
    assert "-> " in done.stdout


@pytest.mark.parametrize(
    "command",
    [
        ("migrate",),
        ("token", "create", "--kind", "admin", "--name", "root"),
        ("grant", "list"),
        ("sweep", "--once"),
        ("workers",),
        ("run", "start", "deploy.plan", "--payload", "{}", "--as", "agent", "--target", "example"),
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_unreachable_database__one_line_naming_the_url(tmp_path: Path, command: tuple[str, ...]) -> None:
    url = f"postgresql+psycopg://parkway:hunter2@127.0.0.1:{free_port()}/nowhere"
    env = embedded_env(PARKWAY_HOME=str(tmp_path), PARKWAY_DATABASE_URL=url, PARKWAY_SECRET_KEY=SECRET)
    done = parkway(*command, env=env, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert lines[0].startswith(
        f"parkway {command[0]}: cannot reach the database at postgresql+psycopg://parkway:***@127.0.0.1:"
    ), lines[0]
    assert "hunter2" not in done.stderr + done.stdout


@pytest.mark.parametrize("key", ["", "too-short"])
def test_migrate__a_secret_key_the_processes_would_refuse_is_refused_first(tmp_path: Path, key: str) -> None:
    url = f"postgresql+psycopg://parkway@127.0.0.1:{free_port()}/nowhere"
    env = embedded_env(PARKWAY_HOME=str(tmp_path), PARKWAY_DATABASE_URL=url, PARKWAY_SECRET_KEY=key)
    done = parkway("migrate", env=env, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("parkway migrate: ") and "PARKWAY_SECRET_KEY" in line, line


@pytest.mark.parametrize(
    "process",
    [
        ("parkway.cli", "migrate"),
        ("celery", "-A", "tasks.celery_app:app", "worker", "-l", "info"),
        ("celery", "-A", "tasks.celery_app:app", "beat"),
        ("uvicorn", "api.app:app", "--port", "0"),
    ],
    ids=["migrate", "worker", "beat", "api"],
)
def test_an_invalid_setting__each_process_refuses_in_one_line(tmp_path: Path, process: tuple[str, ...]) -> None:
    env = embedded_env(PARKWAY_HOME=str(tmp_path), PARKWAY_CLAIM_LEASE_S="abc")
    done = subprocess.run(
        [sys.executable, "-m", *process], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode in (2, 3), (done.returncode, done.stdout, done.stderr)
    [line] = done.stderr.strip().splitlines()
    assert line.endswith("invalid settings: PARKWAY_CLAIM_LEASE_S: Input should be a valid number, unable to parse "
                         "string as a number"), line  # fmt: skip


@pytest.mark.parametrize(
    "process",
    [
        ("celery", "-A", "tasks.celery_app:app", "worker", "-l", "info"),
        ("celery", "-A", "tasks.celery_app:app", "beat"),
        ("uvicorn", "api.app:app", "--port", "0"),
    ],
    ids=["worker", "beat", "api"],
)
def test_a_workflow_module_that_is_not_there__each_process_refuses_naming_it(
    tmp_path: Path, process: tuple[str, ...]
) -> None:
    env = embedded_env(PARKWAY_HOME=str(tmp_path), PARKWAY_IMPORTS="tests.workflows, tests.no_such_workflows")
    done = subprocess.run(
        [sys.executable, "-m", *process], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr[-3000:])
    refusal = "refusing to start: PARKWAY_IMPORTS names 'tests.no_such_workflows', and no such module can be imported"
    assert refusal in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


@pytest.fixture(scope="module")
def migrated_home(initialized_cluster: Path) -> Iterator[Path]:
    """One home migrated once, for the commands below: each refuses before it reads or writes anything there."""
    with initialized_home(initialized_cluster) as home:
        assert parkway("migrate", env=embedded_env(PARKWAY_HOME=str(home)), cwd=home).returncode == 0
        yield home


@pytest.mark.parametrize(
    "command",
    [
        ("run", "start", "deploy.plan", "--as", "agent", "--target", "example"),
        ("sweep", "--once"),
        ("up", "--port", "0", "--no-flower"),
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_a_workflow_module_that_is_not_there__each_command_refuses_naming_it(
    migrated_home: Path, command: tuple[str, ...]
) -> None:
    # Given a migrated database, so nothing else stops the command first
    env = embedded_env(PARKWAY_HOME=str(migrated_home), PARKWAY_IMPORTS="tests.workflows, tests.no_such_workflows")
    done = parkway(*command, env=env, cwd=migrated_home)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr[-3000:])
    [line] = done.stderr.strip().splitlines()
    assert line == (f"parkway {command[0]}: refusing to start: PARKWAY_IMPORTS names 'tests.no_such_workflows', "
                    "and no such module can be imported from here"), line  # fmt: skip
