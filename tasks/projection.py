"""Terminal projections: ``run_metadata.json`` in the run's workspace (the schedule-history row is a view
of the run's record, migration 0028).

The file is written after the canonical terminal event commits, idempotently, from that record alone, by
the worker that ended the run; ``catch_up`` (by the projector, at most once per ``PASS_EVERY_S``, and in
each sweep) checks the files of every run the projection cursor has not passed yet, writes those that
disagree and moves the cursor on (``models.projections``: the rule and its bound). A failed write is
recorded on its run, which stays ``projection_pending``; the sweep calls ``project`` again until all agree,
each failed write pushing the run's next attempt further out.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models import projections, store
from models.status import RUN_TERMINAL, normalize_run_status
from models.store import RunRecord
from models.tables import Run
from parkway.db import transaction
from parkway.settings import get_settings
from tasks.projection_files import write_all, write_atomically

log = logging.getLogger("parkway.projection")


_roots: dict[tuple[str, str], str] = {}  # (configured workspace dir, cwd) -> its resolved path


def metadata_path(run_id: str) -> Path:
    return Path(_workspace_root(), run_id, "run_metadata.json")


def _workspace_root() -> str:
    """The workspace (``PARKWAY_WORKSPACE_DIR``, or the home's) resolved, once per setting and working
    directory (not per projection)."""
    key = (str(get_settings().workspace), os.getcwd())
    root = _roots.get(key)
    if root is None:
        root = _roots[key] = str(Path(key[0]).resolve())
    return root


def metadata(run: Run | RunRecord) -> dict[str, Any]:
    """The projected record: canonical status (legacy words normalized), time, execution, warnings, and a
    failed run's ``error_details`` (null otherwise)."""
    assert run.completed_at is not None
    status, warning = normalize_run_status(run.status)
    warnings = list(run.warnings or []) + ([warning] if warning else [])
    return {
        "run_id": run.id,
        "status": status.value,
        "completed_at": run.completed_at.isoformat(),
        "execution_id": run.finished_by,
        "warnings": warnings,
        "error_details": run.error_details,
    }


def project(run_id: str) -> bool:
    """Bring every projection of a terminal run to its canonical record; True when they all agree.

    Runs under the run's row lock (a concurrent projector of the same run skips it), so the file and the
    cleared failure are written by one projector from one read of the record.
    """
    with transaction() as session:
        run = store.lock_run_for_projection(session, run_id)
        if run is None or run.completed_at is None or normalize_run_status(run.status)[0] not in RUN_TERMINAL:
            return False
        if not run.projection_pending:
            return True
        try:
            write_unless_agrees(metadata_path(run_id), metadata(run))
        except OSError as exc:
            next_at = projections.record_projection_failure(session, run.id, run.projection_attempts)
            log.warning("projection write failed; the sweep retries it from %s: %s", next_at, exc,
                        extra={"run_id": run_id, "projection_attempts": run.projection_attempts + 1})  # fmt: skip
            return False
        return not run.projection_failed or store.clear_projection_pending(session, run)


def write_unless_agrees(path: Path, content: dict[str, Any]) -> None:
    """``write_atomically`` unless the file holds ``content`` already."""
    if not _agrees(path, content):
        write_atomically(path, content)


def _agrees(path: Path, content: dict[str, Any]) -> bool:
    try:
        with open(path, "rb") as file:
            return bool(json.load(file) == content)
    except (OSError, ValueError):
        return False


def catch_up(batch: int = 1000, written: frozenset[str] = frozenset()) -> int:
    """One pass of the projection cursor (``models.projections``): the files of the terminal runs it has not
    passed, checked (those in ``written`` were just written by this process) and written where they disagree,
    the failed ones recorded on their runs, the cursor moved on: one transaction, one row write at most.
    Returns how many files it wrote (0 too when another pass holds the cursor)."""
    with transaction() as session:
        read = projections.ended_past_cursor(session, batch=batch, known=written)
        if read is None:
            return 0
        was, to, records = read
        todo = [r for r in records if not _agrees(metadata_path(r.id), metadata(r))]
        done = {r.id for r in write_committed(todo)}
        failed = [r for r in todo if r.id not in done]
        projections.record_projection_failures(session, failed)
        projections.advance_cursor(session, was, to)
        return len(todo) - len(failed)


def project_quietly(run_ids: list[str]) -> None:
    """After a commit: try the projections now; any failure is left to the sweep."""
    for run_id in run_ids:
        try:
            project(run_id)
        except Exception:
            log.warning("projection failed; the sweep retries it", exc_info=True, extra={"run_id": run_id})


def write_committed(records: list[RunRecord]) -> list[RunRecord]:
    """Write ``run_metadata.json`` of each record a terminal commit returned (``write_all``: together);
    returns those written. A failed write is logged and left to the next ``catch_up``. No lock is
    taken: a record is final, so a concurrent projector (the sweep) writes the same bytes."""
    files, kept = [], []
    for record in records:
        try:
            files.append((metadata_path(record.id), metadata(record)))
            kept.append(record)
        except Exception:
            log.warning("projection failed; the sweep retries it", exc_info=True, extra={"run_id": record.id})
    written = []
    for record, error in zip(kept, write_all(files), strict=True):
        if error is None:
            written.append(record)
        else:
            log.warning("projection failed; the sweep retries it", exc_info=error, extra={"run_id": record.id})
    return written


_BATCH = 100  # records written in one window, at most
_LINGER_S = 0.2  # the window: how long the first record waits for others to share its wake-up and transaction
PASS_EVERY_S = 1.0  # a process's cursor passes, at most one this often (the projected files are not held back)
_FLUSH = None  # queued by ``drain``: the pass owed runs now


class _Projector:
    """A thread per process that writes the projections of the runs this process just ended, so the task
    that ended a run does not wait for two ``fsync`` calls before it takes the next message. The record is
    final when it is queued; if the process dies first, the run stays ``projection_pending`` (the cursor
    has not passed it) and the sweep's ``catch_up`` writes it.

    The first record to arrive opens a window of ``_LINGER_S``; at its end the thread writes the files of
    every record queued by then (at most ``_BATCH``). A ``catch_up`` (one transaction, the cursor moved past
    every run ended below the log's horizon: these, and other processes' too) follows once ``PASS_EVERY_S``
    has passed since this process's last one, then or as soon as it has: a pass costs five statements
    whatever it covers, and under load a window is much shorter. Under load that is one wake-up per window
    and at most one row write per ``PASS_EVERY_S``, whatever the number of runs; a burst's last files are
    passed within ``PASS_EVERY_S`` of the pass before.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid: int | None = None
        self.queue: queue.Queue[RunRecord | None] = queue.Queue()

    def submit(self, record: RunRecord) -> None:
        with self.lock:
            if self.pid != os.getpid():  # first use in this process (a forked pool child has no thread)
                self.pid, self.queue = os.getpid(), queue.Queue()
                threading.Thread(target=self._loop, args=(self.queue,), name="parkway-projector", daemon=True).start()
        self.queue.put(record)

    def drain(self) -> None:
        """Wait until every queued record of this process is projected and passed by the cursor, the pass it
        owes run now (benchmarks and tests)."""
        if self.pid == os.getpid():
            self.queue.put(_FLUSH)
            self.queue.join()

    @staticmethod
    def _loop(items: queue.Queue[RunRecord | None]) -> None:
        backlog, owed = False, _Owed()
        while True:
            try:
                taken = [items.get(timeout=owed.wait())]
            except queue.Empty:
                taken = []  # nothing came before the pass owed fell due
            pass_now = not taken or taken[0] is _FLUSH
            if not pass_now and not backlog:
                # The window. Records queued meanwhile do not wake this thread: ``Queue.put`` notifies only
                # a thread waiting in ``get``, and this one sleeps. (Waiting in ``get`` with a timeout
                # instead cost a wake-up, a thread switch and a GIL hand-over per record.)
                time.sleep(_LINGER_S)
            while len(taken) < _BATCH:
                try:
                    taken.append(items.get_nowait())
                except queue.Empty:
                    break
            backlog = len(taken) == _BATCH  # more may be waiting: take them without another window
            records = [r for r in taken if r is not _FLUSH]
            owed.took(len(taken), records)
            try:
                owed.written.update(r.id for r in write_committed(records))
                if pass_now or len(records) < len(taken) or owed.due():
                    owed.run()
            except Exception:
                log.warning("projection pass failed; the sweep retries it", exc_info=True)
                owed.forget()
            owed.acknowledge(items)


@dataclass
class _Owed:
    """What a projector's next cursor pass owes: the runs it wrote since the last one (their files need not
    be read back), how many records it took, and how many queue items wait to be marked done until that
    pass has run (``drain`` joins the queue: it returns once the runs are passed, not only written)."""

    written: set[str] = field(default_factory=set)
    records: int = 0
    items: int = 0
    last: float = -PASS_EVERY_S

    def took(self, items: int, records: list[RunRecord]) -> None:
        self.items, self.records = self.items + items, self.records + len(records)

    def wait(self) -> float | None:
        """How long the thread may wait for a record: until the pass owed falls due; with none, for ever."""
        return max(0.0, self.last + PASS_EVERY_S - time.monotonic()) if self.items else None

    def due(self) -> bool:
        return time.monotonic() - self.last >= PASS_EVERY_S

    def run(self) -> None:
        """The pass, when a record is owed one (a flush with nothing written runs none)."""
        if self.records:
            self.last = time.monotonic()
            catch_up(written=frozenset(self.written))
        self.forget()

    def forget(self) -> None:
        self.written.clear()
        self.records = 0

    def acknowledge(self, items: queue.Queue[RunRecord | None]) -> None:
        """Once no pass is owed, every item taken is done."""
        if not self.records:
            for _ in range(self.items):
                items.task_done()
            self.items = 0


_projector = _Projector()


def drain_projections() -> None:
    """Wait for this process's projector to finish what it was given."""
    _projector.drain()


def project_soon(record: RunRecord) -> None:
    """After the commit that ended a run: project it on this process's projector thread."""
    _projector.submit(record)
