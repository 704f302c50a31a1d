"""The bench's own services: a PostgreSQL database, a Redis index, worker (and API) subprocesses.

Every subprocess starts in its own session and is registered here; ``cleanup()`` (called from ``finally``,
``atexit`` and the SIGINT/SIGTERM handlers) kills whatever is still running, so nothing outlives the bench.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from parkway.children import QUEUES  # every named queue (bench/overhead_workers.py reads it here)

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN_URL = os.environ.get("BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS_HOST_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")
SECRET_KEY = "bench-secret-key-" + "b" * 40

_started = time.monotonic()
_procs: list[subprocess.Popen[bytes]] = []
_held: list[Any] = []


def log(message: str) -> None:
    """A progress line: elapsed time since the bench started, then the message."""
    print(f"[{time.monotonic() - _started:7.1f}s] {message}", flush=True)


# --------------------------------------------------------------------------- processes


def _kill_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def stop_process(proc: subprocess.Popen[bytes], *, grace_s: float = 10.0, main_only: bool = False) -> None:
    """SIGTERM the process group (warm shutdown), SIGKILL it after ``grace_s``. ``main_only``: SIGTERM the
    main process alone (a Celery worker: it lets its pool children finish what they run, where a SIGTERM of
    its own would end a child mid-task and leave that task's claim held, with no sweep in the bench to free it)."""
    if proc.poll() is None:
        if main_only:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        else:
            _kill_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc, signal.SIGKILL)
            proc.wait(timeout=10)
    # Pool children that outlived their parent are still in the group.
    _kill_group(proc, signal.SIGKILL)
    if proc in _procs:
        _procs.remove(proc)


def cleanup() -> None:
    # Newest first: workers and the API stop before the broker they talk to.
    for proc in reversed(list(_procs)):
        with contextlib.suppress(Exception):
            stop_process(proc, grace_s=3.0)


def _on_signal(signum: int, _frame: Any) -> None:
    signal.signal(signum, signal.SIG_DFL)
    log(f"signal {signum}: stopping every subprocess")
    cleanup()
    raise KeyboardInterrupt


def install_cleanup() -> None:
    atexit.register(cleanup)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)


def _die_with_parent(sig: int) -> Any:
    """For ``preexec_fn``: the kernel sends ``sig`` to the child when the bench dies, even by SIGKILL
    (when no ``finally`` or signal handler can run)."""

    def preexec() -> None:
        import ctypes

        with contextlib.suppress(Exception):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG

    return preexec


def spawn(
    cmd: list[str],
    *,
    env: dict[str, str],
    log_path: Path,
    on_parent_death: int = signal.SIGKILL,
    cwd: Path = ROOT,
    pipes: bool = False,
) -> subprocess.Popen[bytes]:
    """Start a subprocess in its own session, registered for cleanup and tied to this process's life
    (``pipes``: its stdin and stdout are pipes to this process, its stderr goes to the log)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if pipes else None,
            stdout=subprocess.PIPE if pipes else out,
            stderr=out if pipes else subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent(on_parent_death),
        )
    _procs.append(proc)
    return proc


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found.append(int(entry))
    return sorted(found)


CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_ms(pid: int) -> float:
    """User + system CPU time a process has used, in ms (0 when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / CLK_TCK


def thread_cpu_ms(pid: int) -> dict[int, float]:
    """User + system CPU time of each thread of a process, in ms, by thread id (empty when it is gone)."""
    out: dict[int, float] = {}
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return out
    for tid in tids:
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[tid] = (int(fields[11]) + int(fields[12])) * 1000 / CLK_TCK
    return out


def proc_memory(pid: int) -> dict[str, float]:
    """VmHWM (peak RSS) and VmRSS of a process, in MB."""
    out: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0]) / 1024
    except OSError:
        pass
    return out


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    log_path: Path
    name: str

    def text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while "ready." not in self.text():
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited with {self.proc.returncode}:\n{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker {self.name} not ready after {timeout}s:\n{self.text()[-3000:]}")
            time.sleep(0.05)

    def pool_children(self) -> list[int]:
        return children_of(self.proc.pid)

    def stop(self) -> None:
        stop_process(self.proc, grace_s=20.0, main_only=True)


# --------------------------------------------------------------------------- services


def admin_sql(sql: str) -> None:
    engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()


def database_url(name: str) -> str:
    return PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"


def create_database(name: str) -> str:
    admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin_sql(f'CREATE DATABASE "{name}"')
    return database_url(name)


def drop_database(name: str) -> None:
    admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _clients_on(redis_url: str, index: int) -> int:
    """Connections (other than ours) that currently have this database selected."""
    import redis

    client = redis.Redis.from_url(f"{redis_url}/0")
    try:
        return sum(1 for c in client.client_list() if str(c.get("db")) == str(index))
    finally:
        client.close()


def claim_redis_db(preferred: int, redis_url: str = REDIS_HOST_URL) -> int:
    """Hold a Redis index for the bench alone: the lock file the test suite takes (so a concurrent
    ``make test`` never picks it and never flushes it under us), and no client connected to it now."""
    order = [preferred, *[i for i in range(15, 0, -1) if i != preferred]]
    for index in order:
        handle = open(f"/tmp/parkway-test-redis-db-{index}.lock", "w")  # noqa: SIM115  (held for the run)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        if _clients_on(redis_url, index):
            handle.close()
            continue
        _held.append(handle)
        return index
    raise RuntimeError("no free Redis database index (1-15 are all held or in use); try --private-redis")


_private_redis: dict[str, int] = {}


def private_redis_pid() -> int | None:
    return _private_redis.get("pid")


def start_private_redis(out_dir: Path) -> str:
    """A redis-server of the bench's own on a free port (no persistence); returns its URL."""
    import shutil

    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("--private-redis needs redis-server on PATH")
    port = free_port()
    cmd = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = spawn(cmd, env=dict(os.environ), log_path=out_dir / "logs" / "redis.log")
    _private_redis["pid"] = proc.pid
    import redis

    deadline = time.monotonic() + 20
    while True:
        try:
            redis.Redis(port=port).ping()
            return f"redis://127.0.0.1:{port}"
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise RuntimeError("the private redis-server did not start") from None
            time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Services:
    """The bench's database, broker and subprocesses; ``env`` is what every child gets."""

    db_name: str
    database_url: str
    broker_url: str
    out_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    workers: list[Worker] = field(default_factory=list)
    loglevel: str = "info"
    concurrency: int = 2
    started: int = 0

    def child_env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PARKWAY_", "BENCH_WHAT_IF"))}
        env.update(self.env)
        env["PYTHONPATH"] = str(ROOT)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra)
        return env

    def start_worker(self, *, wait: bool = True, queues: str = QUEUES) -> Worker:
        # A new name (and log) per start: "ready." in an old log must not count for a new worker.
        self.started += 1
        name = f"bench{self.started}"
        cmd = [
            sys.executable, "-m", "celery", "-A", "tasks.celery_app:app", "worker",
            "-l", self.loglevel, "-P", "prefork", "-c", str(self.concurrency), "-n", f"{name}@%h",
            "-Q", queues, "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        # SIGTERM when the bench dies: a warm shutdown that also takes the pool children down.
        proc = spawn(
            cmd,
            env=self.child_env(),
            log_path=self.out_dir / "logs" / f"{name}.log",
            on_parent_death=signal.SIGTERM,
        )
        worker = Worker(proc=proc, log_path=self.out_dir / "logs" / f"{name}.log", name=name)
        self.workers.append(worker)
        if wait:
            worker.wait_ready()
        return worker

    def stop_workers(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.workers.clear()

    def flush_broker(self) -> None:
        import redis

        redis.Redis.from_url(self.broker_url).flushdb()

    def redis(self) -> Any:
        import redis

        return redis.Redis.from_url(self.broker_url)


def drop_foreign_keys(engine: Any) -> None:
    """``--what-if no-foreign-keys``: drop every foreign key of the bench database (PostgreSQL)."""
    from sqlalchemy import text

    with engine.begin() as conn:
        rows = conn.execute(
            text("SELECT conrelid::regclass::text, conname FROM pg_constraint WHERE contype = 'f'")
        ).all()
        for table, name in rows:
            conn.execute(text(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"'))
    log(f"what-if no-foreign-keys: dropped {len(rows)} foreign keys")


def discard_event_rows(engine: Any) -> None:
    """``--what-if no-event-rows``: every insert into ``events`` of the bench database is dropped by a row
    trigger (the statements still build and send their events: what the rows cost PostgreSQL, heap, indexes
    and WAL, less the trigger's own call)."""
    from sqlalchemy import text

    with engine.begin() as conn:
        conn.execute(text("CREATE FUNCTION discard() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END'"))
        conn.execute(text("CREATE TRIGGER discard BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION discard()"))
    log("what-if no-event-rows: inserts into events are discarded")
