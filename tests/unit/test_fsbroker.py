"""The embedded broker writes each message file atomically (``parkway.fsbroker``)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from kombu import Connection

import tasks.celery_app  # noqa: F401  (installs the transport, as every Parkway process does)
from parkway.fsbroker import Transport


def _connection(folder: Path) -> Connection:
    return Connection(
        "filesystem://",
        transport_options={"data_folder_in": str(folder), "data_folder_out": str(folder)},
    )


def test_filesystem_url__resolves_to_the_atomic_transport(tmp_path: Path) -> None:
    with _connection(tmp_path) as conn:
        assert isinstance(conn.transport, Transport)


def test_put__a_reader_never_sees_a_partial_message(tmp_path: Path) -> None:
    # Given a reader that claims every message file the moment it appears, as a worker polling does
    queue, taken = tmp_path / "queue", tmp_path / "taken"
    queue.mkdir()
    taken.mkdir()
    seen: list[bytes] = []
    stop = threading.Event()

    def pending() -> list[str]:
        return sorted(n for n in os.listdir(queue) if n.partition(".")[2] == "q.msg")

    def read() -> None:
        while not stop.is_set() or pending():
            for name in pending():
                try:
                    moved = (queue / name).rename(taken / name)
                except OSError:
                    continue
                seen.append(Path(moved).read_bytes())

    reader = threading.Thread(target=read)
    reader.start()
    # When 300 messages are put
    with _connection(queue) as conn:
        channel = conn.default_channel
        for n in range(300):
            channel._put("q", {"n": n, "body": "x" * 2000})
    stop.set()
    reader.join(timeout=30)
    # Then every file the reader took was a whole message, and no partial file is left behind
    assert len(seen) == 300
    assert sorted(json.loads(raw)["n"] for raw in seen) == list(range(300))
    assert not [n for n in os.listdir(queue) if n.startswith(".partial-")]
