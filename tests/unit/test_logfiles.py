"""The children's log files of ``parkway up`` (``parkway.logfiles``): bounded, and followed across a rotation."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from parkway import logfiles
from parkway.logfiles import BoundedLog


def test_bounded_log__past_its_size_the_file_moves_to_dot_1_and_a_new_one_starts(tmp_path: Path) -> None:
    log = BoundedLog(tmp_path / "worker.log", max_bytes=50)
    for i in range(12):
        log.write(f"line {i:02d}")  # 8 bytes each
    log.close()
    # Six lines fit in 50 bytes; the seventh moved them to worker.log.1
    assert (tmp_path / "worker.log.1").read_text().splitlines() == [f"line {i:02d}" for i in range(6)]
    assert (tmp_path / "worker.log").read_text().splitlines() == [f"line {i:02d}" for i in range(6, 12)]
    assert not (tmp_path / "worker.log.2").exists()


def test_show__prints_the_tail_then_follows_every_line_across_a_rotation_once(tmp_path: Path) -> None:
    # Given a worker's log with three lines, rotated every few lines from now on
    log = BoundedLog(logfiles.path(tmp_path, "worker"), max_bytes=40)
    for i in range(3):
        log.write(f"old {i}")
    seen: list[str] = []

    def write_more() -> None:
        deadline = time.monotonic() + 10
        while len(seen) < 2 and time.monotonic() < deadline:  # once the tail is out
            time.sleep(0.01)
        for i in range(20):
            log.write(f"new {i:02d}")
            time.sleep(0.1)  # a rotation every half second: slower than the follower's polls, as 10 MB are

    writer = threading.Thread(target=write_more)
    writer.start()
    # When `parkway logs worker -n 2` follows it while twenty more lines are written
    deadline = time.monotonic() + 30
    logfiles.show(tmp_path, ["worker"], lines=2, follow=True, write=seen.append,
                  stop=lambda: "new 19" in seen or time.monotonic() > deadline)  # fmt: skip
    writer.join()
    log.close()
    # Then it printed the last two lines, then each new one once, in order, though the file rotated
    assert (tmp_path / "logs" / "worker.log.1").exists()
    assert seen == ["old 1", "old 2", *[f"new {i:02d}" for i in range(20)]]
