"""CLI fixtures: a new ``PARKWAY_HOME`` whose embedded PostgreSQL is stopped and removed afterwards.

``home`` (``initialized_home`` for a fixture of wider scope) starts from a copy of one data directory
initialized once per run (initdb, then the ``parkway`` database made, and stopped): a home whose database was
made and never used, without each test paying for initdb. ``empty_home`` has nothing in it, for what a first
start does from nothing.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from parkway import embedded
from tests.conftest import CLUSTER_DIR


@pytest.fixture(scope="session")
def initialized_cluster() -> Path:
    """The run's initialized data directory, made by whichever of its processes needs it first."""
    directory = embedded.data_dir(CLUSTER_DIR)
    CLUSTER_DIR.mkdir(parents=True, exist_ok=True)
    with open(CLUSTER_DIR / "made.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other xdist workers wait here, then find it made
        if not (CLUSTER_DIR / "made").exists():
            embedded.url(directory)  # initdb, start, CREATE DATABASE parkway
            embedded.stop(directory)
            for left in ("log", ".handle_pids.json", "postmaster.opts"):  # this start's, not the copies'
                (directory / left).unlink(missing_ok=True)
            (CLUSTER_DIR / "made").touch()
    return directory


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
def initialized_home(initialized_cluster: Path) -> Iterator[Path]:
    """A new home whose embedded PostgreSQL was initialized and never used (a copy of the run's)."""
    with _new_home() as path:
        # cp -a keeps the owner: as root the server runs as its own user, which must own its data directory
        subprocess.run(["cp", "-a", str(initialized_cluster), str(embedded.data_dir(path))], check=True)
        yield path


@pytest.fixture
def home(initialized_cluster: Path) -> Iterator[Path]:
    """A new home whose embedded PostgreSQL was initialized and never used."""
    with initialized_home(initialized_cluster) as path:
        yield path


@pytest.fixture
def empty_home() -> Iterator[Path]:
    """A new home with nothing in it: a first start makes its data directory (initdb) itself."""
    with _new_home() as path:
        yield path
