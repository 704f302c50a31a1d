"""Writing projection files all or nothing (``write_all``): each through a temp file of its own, synced,
renamed, its directory synced, so a crash leaves the old file or the new one, never a part; and their JSON
text (``indented``)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any


def write_atomically(path: Path, content: dict[str, Any]) -> None:
    """Write one file all or nothing (see ``write_all``); raises what stopped it."""
    error = write_all([(path, content)])[0]
    if error is not None:
        raise error


_SCALARS = {type(None): lambda _: "null", bool: lambda v: "true" if v else "false", int: int.__repr__,
            str: encode_basestring_ascii}  # fmt: skip


def indented(content: dict[str, Any]) -> str:
    """``json.dumps(content, indent=2, sort_keys=True)``, the same text, for a record whose values are mostly
    scalars: with ``indent``, ``json`` encodes in Python, piece by piece, and a file's encoding cost as much
    as its writing; here a null, boolean, integer or string value, or an empty list or object, is encoded at
    once, and only any other (a nested container, a float) the way ``indent`` does, shifted to its depth."""
    if not content:
        return "{}"
    lines = []
    for key in sorted(content):
        value = content[key]
        scalar = _SCALARS.get(type(value))
        if scalar is not None:
            text = scalar(value)
        elif isinstance(value, list | dict) and not value:
            text = "[]" if isinstance(value, list) else "{}"
        else:
            text = json.dumps(value, indent=2, sort_keys=True).replace("\n", "\n  ")
        lines.append(f"{encode_basestring_ascii(key)}: {text}")
    return "{\n  " + ",\n  ".join(lines) + "\n}"


@dataclass
class _File:
    """One file on its way through ``write_all``: its temp file, open until synced; the error that stopped it."""

    path: str
    data: bytes
    tmp: str
    fd: int | None = None
    renamed: bool = False
    error: Exception | None = None
    made: tuple[str, ...] = ()  # the directories whose entry this write created (its run directory, say)

    def abandon(self, error: Exception | None = None) -> None:
        self.error = self.error or error
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None
        if not self.renamed:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp)


def write_all(files: list[tuple[Path, dict[str, Any]]]) -> list[Exception | None]:
    """Write each file all or nothing: temp file in the same directory, fsync, rename, fsync the directory
    (and the parent of each directory it had to make, so that a new run directory survives a crash too).

    The files take each step together (all temp files written, then each synced, then each renamed, then
    each directory synced), so the first ``fsync`` of a step commits the journal for the rest and theirs
    find little left to flush; each file still has its own ``fsync`` before its rename and its directory's
    after. A temp file's name is this thread's own (a concurrent writer of the same run, such as the sweep,
    uses another), created 0600 as ``mkstemp`` would. Returns, per file, ``None`` or what left it unwritten
    (its temp file removed, an older file untouched).
    """
    suffix = f".run_metadata.{os.getpid()}.{threading.get_ident()}.tmp"
    todo: dict[str, _File] = {}  # by path: the last content given for a path wins
    for path, content in files:
        data = indented(content).encode()
        todo[str(path)] = _File(str(path), data, os.path.join(os.path.dirname(path), suffix))
    try:
        _each(todo.values(), _open_and_write)
        _each(todo.values(), _sync_and_close)
        _each(todo.values(), _rename)
        _sync_directories([f for f in todo.values() if f.error is None])
    except BaseException:
        for item in todo.values():
            item.abandon()
        raise
    return [todo[str(path)].error for path, _ in files]


def _each(items: Iterable[_File], step: Callable[[_File], None]) -> None:
    for item in items:
        if item.error is None:
            try:
                step(item)
            except Exception as exc:
                item.abandon(exc)


def _open_and_write(item: _File) -> None:
    item.made = _make_directories(os.path.dirname(item.path))
    item.fd = os.open(item.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    view = memoryview(item.data)
    while view:
        view = view[os.write(item.fd, view) :]


def _sync_and_close(item: _File) -> None:
    assert item.fd is not None
    os.fsync(item.fd)
    fd, item.fd = item.fd, None
    os.close(fd)


def _rename(item: _File) -> None:
    os.replace(item.tmp, item.path)
    item.renamed = True


def _make_directories(directory: str) -> tuple[str, ...]:
    """``directory`` and any missing parent, made; those made (a directory a concurrent writer made counts:
    syncing its parent once more is harmless)."""
    missing, at = [], directory
    while not os.path.isdir(at):
        missing.append(at)
        at = os.path.dirname(at)
    if missing:
        os.makedirs(directory, exist_ok=True)
    return tuple(missing)


def _sync_directories(items: list[_File]) -> None:
    """A rename is durable once its directory is synced, and a new directory once its parent is: each
    directory once; a failure fails its files."""
    by_dir: dict[str, list[_File]] = {}
    for item in items:
        for directory in (os.path.dirname(item.path), *(os.path.dirname(made) for made in item.made)):
            by_dir.setdefault(directory, []).append(item)
    for directory, in_it in by_dir.items():
        try:
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except Exception as exc:
            for item in in_it:
                item.error = exc
