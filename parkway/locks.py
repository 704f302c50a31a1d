"""A lock file held for as long as a process lives (``fcntl.flock``), saying who holds it."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO

_held: list[IO[str]] = []  # the lock files this process holds, open until it exits


def hold_for_life(path: Path, holder: str) -> str | None:
    """Take ``path``'s exclusive lock until this process exits and write ``holder`` into it; ``None`` then.
    When another process holds it: what that one wrote (``"unknown"`` if nothing), and nothing is taken."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the process's life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        found = handle.read().strip() or "unknown"
        handle.close()
        return found
    handle.seek(0)
    handle.truncate()
    handle.write(f"{holder}\n")
    handle.flush()
    _held.append(handle)
    return None
