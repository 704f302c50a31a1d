"""Supervised child processes for ``parkway up`` and ``parkway demo``: start, watch, stop (SIGTERM, then
SIGKILL of the process group), and the environment they run in."""

from __future__ import annotations

import collections
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from parkway.logfiles import BoundedLog

ROOT = Path(__file__).resolve().parent.parent
# The worker runs steps, continuations and the sweep; the outbound worker, a process of its own, makes the HTTP
# requests out of Parkway (webhook deliveries, pushes to push handlers), so a receiver that is slow or never
# answers holds one of its processes, never one of the worker's. ``parkway demo``'s workers consume both.
WORK_QUEUES = "parkway.steps,parkway.continuations,parkway.sweep"
OUTBOUND_QUEUES = "parkway.webhooks,parkway.push"
QUEUES = f"{WORK_QUEUES},{OUTBOUND_QUEUES}"


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes a child get SIGTERM if we die without stopping it (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))

    return preexec


class Child:
    """One supervised process in a process group of its own (so a terminal's Ctrl-C reaches only us, and a
    SIGKILL of its group takes its pool children too). Its output is read by a thread: kept as a tail,
    written to ``log`` (bounded: ``parkway.logfiles``) and/or relayed to ``relay`` prefixed with the
    child's name, and scanned for
    ``watch`` markers (e.g. a worker's "ready.")."""

    def __init__(
        self,
        name: str,
        cmd: list[str],
        env: dict[str, str],
        *,
        watch: Sequence[str] = (),
        log: Path | None = None,
        relay: IO[str] | None = None,
        relay_lock: threading.Lock | None = None,
    ) -> None:
        self.name, self.cmd, self.env = name, cmd, env
        self.watch = tuple(watch)
        self.seen: set[str] = set()
        self.lines: collections.deque[str] = collections.deque(maxlen=200)
        self.log, self.relay = log, relay
        self.relay_lock = relay_lock or threading.Lock()
        self.proc: Any = None  # subprocess.Popen[bytes]
        self.reader: threading.Thread | None = None

    def start(self) -> Child:
        self.proc = subprocess.Popen(
            self.cmd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent(),
        )
        self.reader = threading.Thread(target=self._read, name=f"parkway-{self.name}-output", daemon=True)
        self.reader.start()
        return self

    def restart(self) -> Child:
        """Start the command again after it died; what is left of its group (a worker's pool processes)
        is killed first, so nothing of the old one runs beside the new one."""
        self.kill_group()
        self.wait_reader()
        self.seen.clear()
        return self.start()

    def _read(self) -> None:
        stream = getattr(self.proc, "stdout", None)
        if stream is None or isinstance(stream, str):
            return
        log = BoundedLog(self.log) if self.log else None
        try:
            for raw in stream:
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                self.lines.append(line)
                for marker in self.watch:
                    if marker in line:
                        self.seen.add(marker)
                if log is not None:
                    log.write(line)
                if self.relay is not None:
                    with self.relay_lock:
                        try:
                            self.relay.write(f"{self.name:<7}| {line}\n")
                            self.relay.flush()
                        except (OSError, ValueError):
                            self.relay = None
        finally:
            if log is not None:
                log.close()

    @property
    def pid(self) -> int:
        return int(getattr(self.proc, "pid", 0) or 0)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def tail(self, n: int = 15) -> list[str]:
        return list(self.lines)[-n:]

    def signal(self, signum: int) -> None:
        """Signal the main process only (Celery's warm shutdown, uvicorn's graceful one)."""
        if self.alive():
            self.proc.send_signal(signum)

    def kill_group(self) -> None:
        """SIGKILL the process and whatever it started (its process group)."""
        if self.pid <= 0:  # never signal group 0: that is our own
            return
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        if self.proc is not None:
            with suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def group_alive(self) -> bool:
        """Whether any process of this child's group is still there (the child or its children)."""
        if self.pid <= 0:
            return False
        try:
            os.killpg(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def wait_reader(self, timeout: float = 2.0) -> None:
        if self.reader is not None:
            self.reader.join(timeout)


def stop_children(
    children: Sequence[Child],
    *,
    grace_s: float,
    say: Callable[[str], None],
    hurry: Callable[[], bool] = lambda: False,
) -> dict[str, int | None]:
    """SIGTERM each child (warm shutdown: work in flight stays claimed and is re-driven, nothing is
    recorded as canceled), wait up to ``grace_s``, then SIGKILL the stragglers' process groups. A
    ``hurry()`` that turns true (a second Ctrl-C) skips the rest of the grace. Returns the exit codes."""
    for child in children:
        child.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(c.alive() for c in children) and time.monotonic() < deadline and not hurry():
        time.sleep(0.05)
    for child in children:
        if child.alive():
            say(f"{child.name} did not stop within {grace_s:g}s; killing it")
            child.kill_group()
    # What a child started (a worker's pool processes) goes with it; never leave any behind.
    deadline = time.monotonic() + 5
    while any(c.group_alive() for c in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    for child in children:
        if child.group_alive():
            child.kill_group()
        child.wait_reader()
    return {c.name: c.returncode for c in children}


@contextmanager
def stop_signals(handler: Callable[[int], None]) -> Iterator[None]:
    """Route SIGINT and SIGTERM to ``handler(signum)`` for the block; restore the previous handlers."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def on_signal(signum: int, _frame: object) -> None:
        handler(signum)

    for signum in previous:
        signal.signal(signum, on_signal)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def child_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the processes we start: ours, with this checkout importable and output unbuffered."""
    env = dict(os.environ if base is None else base)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in paths:
        paths.insert(0, str(ROOT))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def http_ok(url: str, timeout: float = 1.0) -> bool:
    return http_problem(url, timeout) is None


@functools.cache
def _probe() -> Any:
    """One HTTP client for every probe of this process (``httpx.get`` makes one, and a TLS context, per call:
    polled while a child starts, that takes CPU from the child)."""
    import httpx

    return httpx.Client()


def http_problem(url: str, timeout: float = 1.0) -> str | None:
    """``None`` when ``url`` answers 200; else why not: the answer's ``detail`` (Parkway's error bodies) or
    its status, or that nothing answered."""
    import httpx

    try:
        response = _probe().get(url, timeout=timeout)
    except httpx.HTTPError as exc:
        return f"{url} does not answer ({type(exc).__name__})"
    if response.status_code == 200:
        return None
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = None
    return f"{url} answers {response.status_code}" + (f": {detail}" if isinstance(detail, str) else "")
