"""The children's logs of ``parkway up``: one file each under ``<PARKWAY_HOME>/logs`` (``api.log``,
``worker.log``, ``beat.log``, ``flower.log``, ``broker.log``), bounded in size, and ``parkway logs``,
which prints and follows them.

A file that reaches ``MAX_BYTES`` becomes ``<name>.log.1`` (replacing the one before) and a new file starts:
at most twice ``MAX_BYTES`` per child on disk.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

NAMES = ("api", "worker", "beat", "flower", "broker")
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
    """One file being followed: where we are in it, and which file that was (a rotation makes a new one)."""

    path: Path
    offset: int = 0
    inode: int | None = None
    partial: bytes = field(default=b"")

    def start_at_end(self) -> None:
        with suppress(FileNotFoundError):
            stat = self.path.stat()
            self.offset, self.inode = stat.st_size, stat.st_ino

    def new_lines(self) -> list[str]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return []
        if stat.st_ino != self.inode or stat.st_size < self.offset:  # rotated, or started afresh
            self.offset, self.inode, self.partial = 0, stat.st_ino, b""
        if stat.st_size == self.offset:
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = self.partial + handle.read()
            self.offset = handle.tell()
        *whole, self.partial = data.split(b"\n")
        return [line.decode("utf-8", errors="replace") for line in whole]


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
    for name, tracked in followed.items():
        tracked.start_at_end()  # the tail ends there and following starts there: each line shown once
        for line in last_lines(tracked.path, lines, end=tracked.offset):
            write(prefixed(name, line))
    while follow and not stop():
        for name, tracked in followed.items():
            for line in tracked.new_lines():
                write(prefixed(name, line))
        time.sleep(POLL_S)
