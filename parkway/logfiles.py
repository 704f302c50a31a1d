"""The children's logs of ``parkway up``: one file each under ``<PARKWAY_HOME>/logs`` (``api.log``,
``worker.log``, ``outbound.log``, ``beat.log``, ``flower.log``, ``broker.log``), bounded in size, and
``parkway logs``, which prints and follows them.

A file that reaches ``MAX_BYTES`` becomes ``<name>.log.1`` (replacing the one before) and a new file starts:
at most twice ``MAX_BYTES`` per child on disk.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

NAMES = ("api", "worker", "outbound", "beat", "flower", "broker")
MAX_BYTES = 10 * 1024 * 1024
POLL_S = 0.2


def directory(home: str | Path) -> Path:
    return Path(home).resolve() / "logs"


def path(home: str | Path, name: str) -> Path:
    return directory(home) / f"{name}.log"


class BoundedLog:
    """Appends lines to ``path``; past ``max_bytes`` the file is rotated to ``<path>.1`` first."""

    def __init__(self, target: Path, max_bytes: int = MAX_BYTES) -> None:
        self.path, self.max_bytes = target, max_bytes
        target.parent.mkdir(parents=True, exist_ok=True)
        self.handle: IO[str] = open(target, "a", encoding="utf-8")  # noqa: SIM115
        self.size = self.handle.tell()

    def write(self, line: str) -> None:
        data = line + "\n"
        if self.size and self.size + len(data) > self.max_bytes:
            self.handle.close()
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            self.handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
            self.size = 0
        self.handle.write(data)
        self.handle.flush()
        self.size += len(data.encode("utf-8", errors="replace"))

    def close(self) -> None:
        self.handle.close()


def last_lines(target: Path, n: int, end: int | None = None) -> list[str]:
    """The last ``n`` lines of ``target`` before byte ``end`` (its end by default); none when it does not exist."""
    if n <= 0:
        return []
    try:
        with open(target, "rb") as handle:
            end = handle.seek(0, os.SEEK_END) if end is None else end
            chunk, data = 64 * 1024, b""
            while end > 0 and data.count(b"\n") <= n:
                start = max(0, end - chunk)
                handle.seek(start)
                data = handle.read(end - start) + data
                end = start
    except FileNotFoundError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-n:]


@dataclass
class _Followed:
    """One file being followed, kept open (as ``tail -F`` does): what was written to it before a rotation is
    still read from the old file, then the new file is read from its start."""

    path: Path
    handle: IO[bytes] | None = None
    partial: bytes = b""

    def open(self, *, at_end: bool) -> int:
        """Open the file (at its end, or its start); the offset it is read from, 0 when it does not exist."""
        try:
            self.handle = open(self.path, "rb")  # noqa: SIM115
        except FileNotFoundError:
            return 0
        return self.handle.seek(0, os.SEEK_END if at_end else os.SEEK_SET)

    def new_lines(self) -> list[str]:
        data = self.handle.read() if self.handle is not None else b""
        if self._replaced():
            self.close()
            self.open(at_end=False)
            data += self.handle.read() if self.handle is not None else b""
        if not data:
            return []
        *whole, self.partial = (self.partial + data).split(b"\n")
        return [line.decode("utf-8", errors="replace") for line in whole]

    def _replaced(self) -> bool:
        """Whether the name now holds another file (rotated, or made since) or this one was truncated."""
        try:
            current = self.path.stat()
        except FileNotFoundError:
            return False
        if self.handle is None:
            return True
        if os.fstat(self.handle.fileno()).st_ino != current.st_ino:
            return True
        if current.st_size < self.handle.tell():
            self.handle.seek(0)
        return False

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def show(
    home: str | Path,
    names: Sequence[str],
    *,
    lines: int,
    follow: bool,
    write: Callable[[str], None],
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """Write the last ``lines`` of each named log, then (``follow``) each new line as it comes, until
    ``stop()``. With more than one name every line starts with its log's name."""
    width = max(len(n) for n in names)

    def prefixed(name: str, line: str) -> str:
        return f"{name:<{width}} | {line}" if len(names) > 1 else line

    followed = {name: _Followed(path(home, name)) for name in names}
    try:
        for name, tracked in followed.items():
            end = tracked.open(at_end=True)  # the tail ends there and following starts there: each line once
            for line in last_lines(tracked.path, lines, end=end):
                write(prefixed(name, line))
        while follow and not stop():
            for name, tracked in followed.items():
                for line in tracked.new_lines():
                    write(prefixed(name, line))
            time.sleep(POLL_S)
    finally:
        for tracked in followed.values():
            tracked.close()
