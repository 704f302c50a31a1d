"""CLI fixtures: a fresh ``PARKWAY_HOME`` whose embedded PostgreSQL is stopped and removed afterwards."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from parkway import embedded


@pytest.fixture
def home() -> Iterator[Path]:
    """A new home outside pytest's ``tmp_path``: as root the server runs as its own system user, which must
    traverse the home's parents, and every pytest session resets ``/tmp/pytest-of-root`` to 0700."""
    path = Path(tempfile.mkdtemp(prefix="parkway-home-"))
    try:
        yield path
    finally:
        embedded.stop(embedded.data_dir(path))
        shutil.rmtree(path, ignore_errors=True)
