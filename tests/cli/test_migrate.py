"""``parkway migrate`` as a user runs it: its progress line on stdout, one line (never a traceback) when the
database cannot be reached."""

from __future__ import annotations

from pathlib import Path

from tests.cli.support import embedded_env, free_port, parkway

SECRET = "migrate-test-secret-" + "k" * 32


def test_migrate__says_what_it_did_on_stdout(home: Path) -> None:
    done = parkway("migrate", env=embedded_env(PARKWAY_HOME=str(home)), cwd=home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("parkway migrate: "), (done.stdout, done.stderr)
    assert "-> " in done.stdout


def test_migrate__unreachable_database_is_one_line_naming_the_url(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://parkway:hunter2@127.0.0.1:{free_port()}/nowhere"
    env = embedded_env(PARKWAY_HOME=str(tmp_path), PARKWAY_DATABASE_URL=url, PARKWAY_SECRET_KEY=SECRET)
    done = parkway("migrate", env=env, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert lines[0].startswith(
        "parkway migrate: cannot reach the database at postgresql+psycopg://parkway:***@127.0.0.1:"
    )
    assert "hunter2" not in done.stderr + done.stdout
