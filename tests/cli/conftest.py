"""CLI fixtures: a new ``PARKWAY_HOME`` whose embedded PostgreSQL is stopped and removed afterwards.

``home`` (``initialized_home`` for a fixture of wider scope) starts from a copy of one data directory
initialized once per run (initdb, then the ``parkway`` database made, and stopped): a home whose database was
made and never used, without each test paying for initdb. ``migrated_home`` starts from a copy of that one
migrated once per run, for a test of what happens after the migration, without paying for it either.
``empty_home`` has nothing in it, for what a first start does from nothing.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from parkway import embedded
from tests.cli.support import embedded_env, parkway
from tests.conftest import CLUSTER_DIR


def _made_once(home: Path, make: Callable[[Path], None]) -> Path:
    """The data directory of ``home`` (under ``CLUSTER_DIR``), made by ``make`` in whichever of the run's
    processes needs it first (the other xdist workers wait, then find it made), and left stopped, as copies
    start from it."""
    directory = embedded.data_dir(home)
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "made.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / "made").exists():
            make(directory)
            embedded.stop(directory)
            for left in ("log", ".handle_pids.json", "postmaster.opts"):  # this start's, not the copies'
                (directory / left).unlink(missing_ok=True)
            (home / "made").touch()
    return directory


def _copy(cluster: Path, home: Path) -> None:
    # cp -a keeps the owner: as root the server runs as its own user, which must own its data directory
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", str(cluster), str(embedded.data_dir(home))], check=True)


@pytest.fixture(scope="session")
def initialized_cluster() -> Path:
    """The run's initialized data directory: initdb, started, ``CREATE DATABASE parkway``."""

    def initialize(directory: Path) -> None:
        embedded.url(directory)  # initdb, start, CREATE DATABASE parkway

    return _made_once(CLUSTER_DIR, initialize)


@pytest.fixture(scope="session")
def migrated_cluster(initialized_cluster: Path) -> Path:
    """The run's data directory migrated to head: a copy of the initialized one, ``parkway migrate`` run on it."""

    def migrate(directory: Path) -> None:
        home = directory.parent
        _copy(initialized_cluster, home)
        env = embedded_env(PARKWAY_HOME=str(home))
        done = parkway("migrate", env=env, cwd=home, timeout=180)  # it stops the server it started as it exits
        assert done.returncode == 0, done.stderr[-3000:]

    return _made_once(CLUSTER_DIR / "migrated", migrate)  # copies take its data directory alone, no key file


@contextmanager
def _new_home() -> Iterator[Path]:
    """A new home outside pytest's ``tmp_path``: as root the server runs as its own system user, which must
    traverse the home's parents, and every pytest session resets ``/tmp/pytest-of-root`` to 0700."""
    path = Path(tempfile.mkdtemp(prefix="parkway-home-"))
    try:
        yield path
    finally:
        embedded.stop(embedded.data_dir(path))
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def initialized_home(cluster: Path) -> Iterator[Path]:
    """A new home whose embedded PostgreSQL is a copy of ``cluster`` (the run's initialized one: initialized
    and never used)."""
    with _new_home() as path:
        _copy(cluster, path)
        yield path


@pytest.fixture
def home(initialized_cluster: Path) -> Iterator[Path]:
    """A new home whose embedded PostgreSQL was initialized and never used."""
    with initialized_home(initialized_cluster) as path:
        yield path


@pytest.fixture
def migrated_home(migrated_cluster: Path) -> Iterator[Path]:
    """A new home whose embedded PostgreSQL is migrated to head and holds nothing else."""
    with initialized_home(migrated_cluster) as path:
        yield path


@pytest.fixture
def empty_home() -> Iterator[Path]:
    """A new home with nothing in it: a first start makes its data directory (initdb) itself."""
    with _new_home() as path:
        yield path
