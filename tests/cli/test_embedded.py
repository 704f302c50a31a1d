"""The embedded PostgreSQL (issue 18 item 1): one instance per ``PARKWAY_HOME``, shared by the processes that
start at once (even where the home's path is too long for a unix socket), stopped only by whoever started
it, and one line saying why and where its log is when it cannot start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine, text

from parkway import embedded
from tests.cli.support import embedded_env, parkway

START_AND_SAY_PID = """
import sys
from parkway import embedded
directory = embedded.data_dir(sys.argv[1])
embedded.url(directory)
print(embedded.postmaster(directory).pid)
"""


def test_embedded__processes_starting_at_once_share_one_instance_on_a_long_path(empty_home: Path) -> None:
    # Given a new home whose data directory is too long a path for a unix socket (107 characters)
    home = empty_home / ("a-long-directory-name-" * 4) / "home"
    directory = embedded.data_dir(home)
    assert len(str(directory / ".s.PGSQL.5432")) > 107
    try:
        # When three processes need its database at the same moment
        procs = [
            subprocess.Popen([sys.executable, "-c", START_AND_SAY_PID, str(home)], env=embedded_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(3)
        ]  # fmt: skip
        outputs = [proc.communicate(timeout=120) for proc in procs]
        assert [proc.returncode for proc in procs] == [0, 0, 0], outputs

        # Then they all found one server, listening on a socket outside the long path, that answers
        running = embedded.postmaster(directory)
        assert running is not None
        assert {out.strip() for out, _ in outputs} == {str(running.pid)}
        assert len(str(running.socket())) <= 107
        engine = create_engine(embedded.url(directory))
        with engine.connect() as conn:
            assert conn.execute(text("SELECT current_database()")).scalar_one() == embedded.DATABASE
        engine.dispose()
    finally:
        embedded.stop(directory)
    assert embedded.postmaster(directory) is None


def test_migrate__stops_the_instance_it_started_and_leaves_one_it_did_not(home: Path) -> None:
    directory = embedded.data_dir(home)
    # Given nothing running: migrate starts the instance, says so, and stops it when it is done
    done = parkway("migrate", env=embedded_env(PARKWAY_HOME=str(home)), cwd=home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"parkway migrate: {embedded.describe(directory)}: empty -> "), done.stdout
    assert embedded.postmaster(directory) is None

    # Given it running, started by someone else: migrate uses it and leaves it running
    with embedded.running(directory):
        before = embedded.postmaster(directory)
        again = parkway("migrate", env=embedded_env(PARKWAY_HOME=str(home)), cwd=home)
        assert again.returncode == 0, again.stderr
        assert embedded.postmaster(directory) == before is not None
    assert embedded.postmaster(directory) is None


def test_embedded__that_cannot_start_is_one_line_naming_why_and_its_log(empty_home: Path) -> None:
    # Given a data directory PostgreSQL 18 cannot use (left by another version, and incomplete)
    home = empty_home
    directory = embedded.data_dir(home)
    directory.mkdir()
    (directory / "PG_VERSION").write_text("12\n")
    # When parkway migrate needs it
    done = parkway("migrate", env=embedded_env(PARKWAY_HOME=str(home)), cwd=home)
    # Then one line says it cannot start, why, and where its log is; exit 2, no traceback
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"parkway migrate: {embedded.describe(directory)} cannot start: "), lines
    assert lines[0].endswith(f"(its log: {directory / 'log'})"), lines
    assert embedded.postmaster(directory) is None


def test_cli__finds_its_projects_home_from_a_subfolder_and_never_starts_a_second(home: Path, tmp_path: Path) -> None:
    # Given a project whose var/ is a home that `parkway up` made (PARKWAY_HOME unset), and a folder outside any
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "examples" / "go").mkdir(parents=True)
    elsewhere.mkdir()
    (project / "var").symlink_to(home)
    directory = embedded.data_dir(home)
    assert parkway("migrate", env=embedded_env(), cwd=project).returncode == 0

    # When a command runs in a subfolder of the project
    made = parkway("token", "create", "--kind", "agent", "--name", "found", env=embedded_env(),
                   cwd=project / "examples" / "go")  # fmt: skip
    # Then it used the project's home (its database holds the principal), made no home of its own there, and
    # stopped the PostgreSQL it started
    assert made.returncode == 0 and made.stdout.startswith("pk_"), made.stderr
    assert not (project / "examples" / "go" / "var").exists()
    assert embedded.postmaster(directory) is None
    with embedded.running(directory), create_engine(embedded.url(directory)).connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM principals WHERE name = 'found'")).scalar_one() == 1

    # When one runs outside any project: one line says where it looked, exit 2, and nothing is started or made
    lost = parkway("token", "create", "--kind", "agent", "--name", "lost", env=embedded_env(), cwd=elsewhere)
    assert lost.returncode == 2 and lost.stdout == "", lost.stdout
    assert lost.stderr.strip() == (
        f"parkway token: no Parkway home: none in {elsewhere} or a folder above it (a var/ that `parkway up` made); "
        "run it inside the project, or set PARKWAY_HOME or PARKWAY_DATABASE_URL"
    ), lost.stderr
    assert list(elsewhere.iterdir()) == []
