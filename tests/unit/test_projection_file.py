"""``run_metadata.json`` is written whole or not at all, readable by its owner only, with no temp file left."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from tasks.projection_files import indented, write_all, write_atomically

CONTENT = {
    "run_id": "r1",
    "status": "completed",
    "completed_at": "2026-12-01T00:00:00+00:00",
    "execution_id": "e1",
    "warnings": [],
}


def test_write_atomically__writes_the_indented_sorted_json_0600_and_leaves_no_temp_file(tmp_path: Path) -> None:
    # Given a run directory that does not exist yet
    path = tmp_path / "r1" / "run_metadata.json"

    # When the projection is written
    write_atomically(path, CONTENT)

    # Then it is the canonical JSON, the owner's only, and alone in its directory
    assert path.read_text() == json.dumps(CONTENT, indent=2, sort_keys=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(path.parent) == ["run_metadata.json"]


def test_write_atomically__replaces_an_older_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "r1" / "run_metadata.json"
    write_atomically(path, {**CONTENT, "status": "failed", "warnings": ["x" * 5000]})

    write_atomically(path, CONTENT)

    assert json.loads(path.read_text()) == CONTENT
    assert os.listdir(path.parent) == ["run_metadata.json"]


def test_write_atomically__a_failed_write_leaves_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a projection already written
    path = tmp_path / "r1" / "run_metadata.json"
    write_atomically(path, CONTENT)

    # When the next write fails at its fsync
    def failing_fsync(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space left"):
        write_atomically(path, {**CONTENT, "status": "failed"})

    # Then the old file stands and the temp file is gone
    assert json.loads(path.read_text()) == CONTENT
    assert os.listdir(path.parent) == ["run_metadata.json"]


def test_write_atomically__concurrent_writers_of_one_run_leave_one_whole_file(tmp_path: Path) -> None:
    # Given eight threads projecting the same run at once (the worker's projector and a sweep, say)
    path = tmp_path / "r1" / "run_metadata.json"
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def write() -> None:
        start.wait()
        try:
            for _ in range(20):
                write_atomically(path, CONTENT)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # Then none failed, the file is whole and no temp file is left
    assert not errors
    assert json.loads(path.read_text()) == CONTENT
    assert os.listdir(path.parent) == ["run_metadata.json"]


def test_write_all__syncs_every_file_before_any_rename_and_keeps_a_failed_one_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given three runs' files to write together, the middle one blocked (a directory stands where it goes)
    paths = [tmp_path / f"r{n}" / "run_metadata.json" for n in range(3)]
    paths[1].mkdir(parents=True)
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        calls.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)

    # When they are written
    errors = write_all([(path, {**CONTENT, "run_id": f"r{n}"}) for n, path in enumerate(paths)])

    # Then the two others are whole, the blocked one failed alone, and no temp file is left anywhere
    assert errors[0] is None and errors[2] is None and isinstance(errors[1], IsADirectoryError)
    for n in (0, 2):
        assert json.loads(paths[n].read_text())["run_id"] == f"r{n}"
        assert os.listdir(paths[n].parent) == ["run_metadata.json"]
    assert os.listdir(paths[1].parent) == ["run_metadata.json"]
    # And every temp file was synced before the first rename; after the last, each written directory and
    # the one parent of the two directories the write made
    assert calls == ["fsync"] * 3 + ["rename"] * 3 + ["fsync"] * 3


def test_write_all__a_directory_it_makes_is_synced_in_its_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a workspace with one run's directory made already, and a second workspace not made at all
    root, fresh = tmp_path / "workspace", tmp_path / "fresh" / "workspace"
    (root / "old").mkdir(parents=True)
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)

    # When a new run's file, the old run's, and a run's file in the second workspace are written together
    files = [root / "new" / "run_metadata.json", root / "old" / "run_metadata.json", fresh / "r" / "run_metadata.json"]
    assert write_all([(path, CONTENT) for path in files]) == [None, None, None]

    # Then each file's directory is synced once, and so is the parent of every directory the write made
    # (the workspace, for the new run; every level of the second workspace): nothing else, nothing twice
    directories = [path for path in synced if not path.endswith(".tmp")]
    files_directories = [root / "new", root / "old", fresh / "r"]
    parents_of_made = [root, fresh, fresh.parent, tmp_path]  # of new; and of r, workspace, fresh
    assert sorted(directories) == sorted(str(d) for d in files_directories + parents_of_made)


@pytest.mark.parametrize(
    "content",
    [
        {},
        CONTENT,
        {**CONTENT, "status": "failed", "warnings": ["legacy status word"], "error_details": None},
        {**CONTENT, "error_details": {"partial_failure": True, "running_reviews": [{"id": "v1", "finding_count": 2}],
                                      "result": {"é": "ü\n\u2028", "n": 1.5, "nan": float("nan"), "empty": {}}}},
        {"b": False, "i": -(10**30), "f": -0.0, "l": [[], [{}]], "t": ("x",), "s": "\x00\"\\"},
    ],
)  # fmt: skip
def test_indented__is_json_dumps_with_indent_2_and_sorted_keys(content: dict[str, object]) -> None:
    # When a record is encoded for its file, then the text is json's own indented, sorted form, byte for byte
    assert indented(content) == json.dumps(content, indent=2, sort_keys=True)
