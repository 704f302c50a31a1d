"""What each statement of an answer and a resume costs inside PostgreSQL: counts, not a stopwatch.

``python -m bench.statements ADMIN_URL [N]`` makes a scratch database on the server of
``ADMIN_URL`` (which must load ``pg_stat_statements``), parks N steps, answers them (``tasks.sdk.answer``)
and runs their continuations (``tasks.worker.execute``) in this process, after a warm-up of 20 of each that
is not counted, and prints per completion, for each statement PostgreSQL ran: how many times, its execution
time, the shared blocks it touched per call and the WAL it wrote; then the rows written per table (inserted,
updated, deleted, from ``pg_stat_user_tables``, read once every connection of the run has closed, so that
each backend has flushed its counts) and their sum: the row writes per completion. With
``pg_stat_statements.track = 'all'``, ``track_planning = on`` and ``track_functions = 'all'`` on the server
(``ALTER SYSTEM``, then ``SELECT pg_reload_conf()``) it shows the statements functions run, each statement's
planning (how many of its calls were planned afresh) and each function's calls and time. Then it answers and
resumes N more with nothing tracked in the scratch database and prints the CPU of its backends (``/proc``)
and of this process per completion: the figure the other counts explain.

Blocks and WAL bytes do not depend on how busy the machine is: on a shared machine they are the figures to
compare; the times only beside each other, in one run. A server with the extension, as its owner::

    initdb -D /tmp/pgss -A trust -U postgres
    pg_ctl -D /tmp/pgss -o "-p 5433 -k /tmp -c shared_preload_libraries=pg_stat_statements" start
    python -m bench.statements postgresql://postgres@127.0.0.1:5433/postgres 1000

``--with webhook,push,remote`` puts features the plain path does not use in the data first (issue 42 item 3:
they must cost it nothing): an idle webhook subscription to every event, a registered push handler and a
remote worker, each advertising a key of another workflow. Compare its counts with a run without.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

WARM_UP = 20
_BY_STATEMENT = """
SELECT calls, total_exec_time, shared_blks_hit + shared_blks_read, wal_bytes, toplevel,
       left(regexp_replace(query, '\\s+', ' ', 'g'), 90), plans, total_plan_time
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s)
ORDER BY total_exec_time + total_plan_time DESC
"""
# PL/pgSQL and SQL functions' calls and times (``track_functions = 'all'``), read as the row writes are.
_FUNCTIONS = "SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions"
# The rows written per table; read in the scratch database itself (the statistics are per database).
_ROW_WRITES = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd FROM pg_stat_user_tables
WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY relname
"""
_CONNECTED = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"


def _admin(url: str, sql: str, *args: Any) -> list[Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql, args or None)
        return cursor.fetchall() if cursor.description else []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("admin_url", help="a database URL of the server, as a superuser (libpq form)")
    parser.add_argument("n", nargs="?", type=int, default=1000, help="parked steps (default 1000)")
    parser.add_argument("--with", dest="features", default="", help="comma-separated: webhook, push, remote")
    args = parser.parse_args()
    args.features = [f.strip() for f in args.features.split(",") if f.strip()]
    if set(args.features) - set(FEATURES):
        parser.error(f"--with: one of {', '.join(FEATURES)}")
    try:
        _admin(args.admin_url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        _admin(args.admin_url, "SELECT pg_stat_statements_reset()")
    except psycopg.Error as exc:
        print(f"bench.statements: pg_stat_statements is not usable on that server ({exc}); see --help",
              file=sys.stderr)  # fmt: skip
        return 2
    name = f"parkway_statements_{uuid.uuid4().hex[:8]}"
    _admin(args.admin_url, f'CREATE DATABASE "{name}"')
    try:
        return _measure(args, name)
    finally:
        _admin(args.admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def use_scratch(admin_url: str, name: str) -> None:
    """This process's settings name the scratch database ``name`` on the server of ``admin_url``, migrated."""
    info = psycopg.conninfo.conninfo_to_dict(admin_url)
    server = f"{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}"
    url = f"postgresql+psycopg://{server}/{name}"
    os.environ.update(
        PARKWAY_DATABASE_URL=url,
        PARKWAY_SECRET_KEY=uuid.uuid4().hex * 2,
        PARKWAY_BROKER_URL=os.environ.get("BENCH_STATEMENTS_BROKER_URL", "redis://127.0.0.1:6379/12"),
        PARKWAY_WORKSPACE_DIR=os.path.join("var", "bench-statements", name),
    )
    subprocess.run([sys.executable, "-m", "parkway.cli", "migrate"], check=True, capture_output=True)


def _measure(args: argparse.Namespace, name: str) -> int:
    use_scratch(args.admin_url, name)
    from bench import seed

    scratch = psycopg.conninfo.make_conninfo(args.admin_url, dbname=name)

    def counts() -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[float, ...]]]:
        """Rows inserted, updated, deleted per table so far, and each function's calls and times, once every
        backend of the run has exited."""
        from parkway.db import reset_engine

        reset_engine()  # every connection closed: a backend flushes its counts when it exits
        _wait_until_closed(args.admin_url, name)
        tables = {r[0]: tuple(int(v) for v in r[1:]) for r in _admin(scratch, _ROW_WRITES)}
        return tables, {r[0]: tuple(float(v) for v in r[1:]) for r in _admin(scratch, _FUNCTIONS)}

    n = args.n
    seed.setup_actors()
    _unused_features(args.features)
    parked = seed.seed_parked(2 * (n + WARM_UP))
    completions(parked[:WARM_UP])
    before, functions_before = counts()
    _admin(args.admin_url, "SELECT pg_stat_statements_reset()")
    completions(parked[WARM_UP : WARM_UP + n])
    rows = _admin(args.admin_url, _BY_STATEMENT, name)
    after, functions_after = counts()
    _print_statements(rows, n)
    _print_functions(functions_before, functions_after, n)
    _print_row_writes(before, after, n)
    # The same again with nothing tracked (new connections take the database's settings): the CPU of the
    # database's backends and of this process, after a warm-up on the same connections.
    for setting in ("pg_stat_statements.track = 'none'", "pg_stat_statements.track_planning = off",
                    "track_functions = 'none'"):  # fmt: skip
        _admin(args.admin_url, f'ALTER DATABASE "{name}" SET {setting}')
    completions(parked[WARM_UP + n : 2 * WARM_UP + n])
    start, began = _backends(args.admin_url, name), time.process_time()
    completions(parked[2 * WARM_UP + n :])
    client, end = time.process_time() - began, _backends(args.admin_url, name)
    backends = sum(end.values()) - sum(start.get(pid, 0.0) for pid in end)
    print(f"CPU per completion, untracked: PostgreSQL's backends {backends / n:.3f} ms ({len(end)} backends), "
          f"this process (the answers and the worker's bodies) {client * 1000 / n:.3f} ms")  # fmt: skip
    return 0


def completions(parked: list[Any]) -> None:
    """Answer each of ``parked`` (``bench.seed.Parked``) in-process, run the continuations made ready and project
    the runs ended: completions as a worker makes them, in this process."""
    from sqlalchemy import text

    from bench import seed
    from parkway.db import transaction
    from tasks import sdk
    from tasks.projection import drain_projections
    from tasks.worker import execute

    for p in parked:
        sdk.answer(p.interaction_id, "yes", response_id=uuid.uuid4().hex, principal=seed.HUMAN)
    with transaction() as session:
        ready = session.execute(text("SELECT id FROM continuations WHERE kind = 'resume' AND status = 'ready'"))
        ids = list(ready.scalars())
    for cid in ids:
        outcome = execute(cid)
        assert outcome == "committed", outcome
    drain_projections()


def _print_statements(rows: list[Any], n: int) -> None:
    top = [r for r in rows if r[4]]
    print(f"{n} answers and resumes, per completion:")
    print(f"  top-level statements: {sum(r[1] for r in top) / n * 1000:.0f} µs executing, "
          f"{sum(r[7] for r in rows) / n * 1000:.0f} µs planning (nested included), "
          f"{sum(r[2] for r in top) / n:.0f} blocks, {sum(int(r[3]) for r in top) / n:.0f} B of WAL")  # fmt: skip
    print("  calls  plans    exec µs  plan µs  blocks/call  WAL B  statement (* run inside another: a function's)")
    for calls, exec_ms, blocks, wal, toplevel, query, plans, plan_ms in rows:
        nested = " " if toplevel else "*"
        per_call = f"{blocks / calls:11.1f}" if calls else " " * 11
        figures = f"{calls / n:5.2f}  {plans / n:5.2f}  {exec_ms / n * 1000:9.1f}  {plan_ms / n * 1000:7.1f}"
        print(f"  {figures}  {per_call}  {int(wal) / n:5.0f} {nested}{query}")
    trips = sum(r[0] for r in top) / n
    print(f"  {trips:.2f} round trips per completion (statements sent by the client, BEGIN and COMMIT included)")


def _print_functions(before: dict[str, tuple[float, ...]], after: dict[str, tuple[float, ...]], n: int) -> None:
    print("functions per completion (pg_stat_user_functions; total includes the functions each calls):")
    print("  calls   total µs    self µs  function")
    for name, (calls, total, own) in sorted(after.items(), key=lambda item: -item[1][1]):
        was = before.get(name, (0.0, 0.0, 0.0))
        if calls > was[0]:
            figures = (
                f"{(calls - was[0]) / n:5.2f}  {(total - was[1]) / n * 1000:9.1f}  {(own - was[2]) / n * 1000:9.1f}"
            )
            print(f"  {figures}  {name}")


def _backends(admin_url: str, name: str) -> dict[int, float]:
    """CPU (ms, user + system) of each backend connected to the database ``name``."""
    pids = [r[0] for r in _admin(admin_url, "SELECT pid FROM pg_stat_activity WHERE datname = %s", name)]
    used: dict[int, float] = {}
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        used[pid] = (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")
    return used


FEATURES = ("webhook", "push", "remote")
_OTHER_KEY = "bench.other_workflow"  # a key no bench workflow has


def _unused_features(features: list[str]) -> None:
    """The features named, present in the data but unused by the plain path (see ``--with``)."""
    from models import store
    from parkway.crypto import seal
    from parkway.db import transaction

    with transaction() as session:
        if "webhook" in features:
            store.create_webhook(session, url="http://127.0.0.1:9/idle", events=["*"], targets=None,
                                 description="idle", secret_sealed=seal("whsec_idle"))  # fmt: skip
        if "push" in features:
            store.create_handler(session, url="http://127.0.0.1:9/push", serves=[_OTHER_KEY],
                                 secret_sealed=seal("push"), live_s=3600)  # fmt: skip
        if "remote" in features:
            store.advertise(session, store.Advert(id=uuid.uuid4().hex, node="bench-remote", pid=0,
                                                  steps=(_OTHER_KEY,), continuations=(), ttl_s=3600,
                                                  remote=True))  # fmt: skip


def _wait_until_closed(admin_url: str, name: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _admin(admin_url, _CONNECTED, name)[0][0]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"connections to {name} still open after {timeout_s} s")
        time.sleep(0.05)


def _print_row_writes(before: dict[str, tuple[int, ...]], after: dict[str, tuple[int, ...]], n: int) -> None:
    print("row writes per completion (pg_stat_user_tables):")
    print("  inserted  updated  deleted  (of the updates HOT)  table")
    total = 0.0
    for table, counts in sorted(after.items()):
        done = [(a - b) / n for a, b in zip(counts, before.get(table, (0, 0, 0, 0)), strict=True)]
        if any(done):
            total += sum(done[:3])
            print(f"  {done[0]:8.2f}  {done[1]:7.2f}  {done[2]:7.2f}  ({done[3]:4.2f})  {table}")
    print(f"  {total:.2f} row writes per completion in all")


if __name__ == "__main__":
    raise SystemExit(main())
