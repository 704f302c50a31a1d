"""``make bench`` / ``python -m bench``: the cost of exactly-once, measured beside bare Celery in one run.

The bench makes its own PostgreSQL database (``parkway_bench``, plus ``parkway_bench_sweep`` for the
sweep case), holds its own Redis index (14 unless a test session holds it), starts its own
``celery worker -c 2`` subprocesses with ``PARKWAY_IMPORTS=bench.workflows``, and removes all of it on
exit (Ctrl-C included). Results: a table on stdout and ``bench/out/results-<timestamp>.json``.

Its last case, ``bare``, is ``bench.ab``: Parkway driven through its public entry points beside a Celery
app with nothing of Parkway in it (``bench.bare``), with the ratios issue 20 asks for. ``--ab TREE`` runs
only that, for this tree and TREE, their reps alternating. ``python -m bench.ladder`` measures, beside the
same baselines and Parkway, the contract's own floor: minimal implementations adding one contract element at
a time (issue 42; ``bench.ladder_sql`` lists the rungs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import ROOT, Services, log

OUT = ROOT / "bench" / "out"
# One lock for every checkout on the machine (a run of another worktree shares the cores and the services).
MACHINE_LOCK = Path(tempfile.gettempdir()) / "parkway-bench.lock"
CASES = (
    "anatomy", "throughput", "latency", "recovery", "broker_down", "sweep", "bare", "scale", "webhooks", "remote",
    "sealing",
)  # fmt: skip
# Run only when asked for: ``scale`` seeds 10^5 (or 10^6) waits of its own; ``webhooks`` repeats the
# throughput case twice a rep and delivers 11 backlogs; ``remote`` needs Node and the built TypeScript client;
# ``sealing`` repeats the Python throughput case with the seal on and off.
DEFAULT_CASES = CASES[:-4]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: small N, one rep, small sweep")
    p.add_argument("--full", action="store_true", help="the issue's sizes (N=5000, 10^4 recovery, 10^6 sweep)")
    p.add_argument("--reps", type=int, help="repetitions of throughput and latency (default 3)")
    p.add_argument("--n", type=int, help="throughput: parked steps answered per rep (default 1000)")
    p.add_argument("--threads", type=int, default=4, help="producer threads (default 4)")
    p.add_argument("--http-clients", type=int, default=8, help="concurrent HTTP clients (default 8)")
    p.add_argument("--no-http", dest="http", action="store_false", help="skip the HTTP throughput variant")
    p.add_argument("--latency-rate", type=float, default=100.0, help="answers per second (default 100)")
    p.add_argument("--latency-seconds", type=float, help="latency run length (default 10)")
    p.add_argument("--recovery-n", type=int, help="recovery: continuations (default 10000, the issue's size)")
    p.add_argument("--recovery-reps", type=int, help="recovery: repetitions (default 1)")
    p.add_argument(
        "--sweep-sizes",
        type=lambda s: [int(float(x)) for x in s.split(",")],
        help="terminal runs per sweep measurement, comma-separated (default 1e4,1e5; --full 1e4,1e6)",
    )
    p.add_argument("--sweep-due", type=int, help="due rows of each kind in a sweep pass (default 500)")
    p.add_argument("--sweep-reps", type=int, help="sweep passes per size (default 5)")
    p.add_argument(
        "--scale-sizes",
        type=lambda s: [int(float(x)) for x in s.split(",")],
        help="scale: pending waits, comma-separated (default 1e3,1e5; --full 1e3,1e5,1e6)",
    )
    p.add_argument("--scale-reps", type=int, default=3, help="scale: repetitions at each size (default 3)")
    p.add_argument("--scale-samples", type=int, default=20, help="scale: samples of a figure per rep (default 20)")
    p.add_argument(
        "--webhook-events", type=int, help="webhooks: backlog per subscription (default 500; --quick 200, --full 1000)"
    )
    p.add_argument(
        "--remote-concurrency", type=int, default=8, help="remote: the Node agent's worker() concurrency (default 8)"
    )
    p.add_argument(
        "--seed",
        choices=("bulk", "store"),
        default="bulk",
        help="how parked steps are made: COPY of the rows the store writes (default) or the store itself",
    )
    p.add_argument(
        "--ab",
        metavar="TREE",
        type=Path,
        help="A/B: this tree and TREE (a checkout with its own .venv) beside one bare baseline, reps alternating",
    )
    p.add_argument(
        "--cases",
        default=",".join(DEFAULT_CASES),
        help=f"comma-separated subset of {','.join(CASES)} (default: all but scale, webhooks and remote)",
    )
    p.add_argument("--redis-db", type=int, default=14, help="preferred Redis index (default 14)")
    p.add_argument(
        "--private-redis",
        action="store_true",
        help="start a redis-server of the bench's own on a free port instead of an index of 127.0.0.1:6379",
    )
    p.add_argument("--db-name", default="parkway_bench", help="PostgreSQL database to create (and drop)")
    p.add_argument("--keep-db", action="store_true", help="do not drop the bench databases at the end")
    p.add_argument(
        "--what-if",
        default="",
        help="experiments on Parkway in the bench's processes only (comma-separated names of KNOWN_WHAT_IF in "
        "bench/workflows.py, each described there)",
    )
    p.add_argument("--py-spy", action="store_true", help="sample the workers with py-spy during throughput")
    p.add_argument(
        "--profile",
        action="store_true",
        help="anatomy: cProfile the in-process answers and resumes (top 40 of each printed)",
    )
    p.add_argument("--worker-loglevel", default="info", help="celery worker -l (default info)")
    args = p.parse_args(argv)
    quick = args.quick
    # Three sizes: --quick (a smoke run, ~1 min), the default (~5-10 min on 2 cores; recovery already at the
    # issue's 10^4), --full (the sizes: N=5,000, recovery of 10^4, sweep over 10^6 terminal runs;
    # ~40 min, most of it loading 10^6).
    mode = "quick" if quick else "full" if args.full else "default"
    defaults = {
        "reps": {"quick": 1, "default": 3, "full": 3}[mode],
        "n": {"quick": 300, "default": 1000, "full": 5000}[mode],
        "latency_seconds": {"quick": 3.0, "default": 10.0, "full": 10.0}[mode],
        "recovery_n": {"quick": 500, "default": 10_000, "full": 10_000}[mode],
        "recovery_reps": 1,
        "webhook_events": {"quick": 200, "default": 500, "full": 1000}[mode],
        "sweep_sizes": {"quick": [1_000, 10_000], "default": [10_000, 100_000], "full": [10_000, 1_000_000]}[mode],
        "sweep_due": {"quick": 100, "default": 500, "full": 500}[mode],
        "sweep_reps": {"quick": 3, "default": 5, "full": 5}[mode],
        "scale_sizes": {"quick": [1_000, 10_000], "default": [1_000, 100_000], "full": [1_000, 100_000, 1_000_000]}[
            mode
        ],
    }
    args.mode = mode
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(args.cases) - set(CASES)
    if unknown:
        p.error(f"unknown cases: {', '.join(sorted(unknown))}")
    return args


def _cmd(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=ROOT).stdout.strip()
    except Exception:
        return ""


def machine(services: Services) -> dict[str, Any]:
    from importlib.metadata import version

    from sqlalchemy import text

    from parkway.db import transaction

    info: dict[str, Any] = {"nproc": os.cpu_count(), "python": platform.python_version()}
    cpuinfo = Path("/proc/cpuinfo").read_text()
    info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if "model name" in ln), "?")
    meminfo = Path("/proc/meminfo").read_text()
    total_kb = int(next(ln.split()[1] for ln in meminfo.splitlines() if ln.startswith("MemTotal")))
    info["memory_gb"] = round(total_kb / 1024 / 1024, 1)
    info["kernel"] = platform.release()
    with transaction() as session:
        info["postgresql"] = session.execute(text("SHOW server_version")).scalar_one()
        info["pg_synchronous_commit"] = session.execute(text("SHOW synchronous_commit")).scalar_one()
        info["pg_shared_buffers"] = session.execute(text("SHOW shared_buffers")).scalar_one()
    info["redis"] = services.redis().info("server").get("redis_version")
    for pkg in ("celery", "kombu", "redis", "sqlalchemy", "psycopg", "fastapi", "uvicorn"):
        try:
            info[f"pkg_{pkg}"] = version(pkg)
        except Exception:
            info[f"pkg_{pkg}"] = None
    info["git"] = _cmd(["git", "rev-parse", "--short", "HEAD"])
    info["git_dirty"] = bool(_cmd(["git", "status", "--porcelain", "--untracked-files=no"]))
    return info


def prepare_environment(args: argparse.Namespace, broker: str, out_dir: Path) -> Services:
    """Point this process (and every child) at the bench's own database and broker, before anything
    imports the Celery app."""
    home = OUT / "home"
    home.mkdir(parents=True, exist_ok=True)
    url = harness.database_url(args.db_name)
    env = {
        "PARKWAY_DATABASE_URL": url,
        "PARKWAY_BROKER_URL": broker,
        "PARKWAY_SECRET_KEY": harness.SECRET_KEY,
        "PARKWAY_IMPORTS": "bench.workflows",
        "PARKWAY_HOME": str(home),
        "PARKWAY_WORKSPACE_DIR": str(home / "workspaces"),
    }
    if args.what_if:
        env["BENCH_WHAT_IF"] = args.what_if
    # Tuning knobs the caller set (PARKWAY_SWEEP_BATCH …) pass through; a crash point never does.
    for key, value in os.environ.items():
        if key.startswith("PARKWAY_") and key not in env and key not in ("PARKWAY_CRASH_AT",):
            env[key] = value
    for key in [k for k in os.environ if k.startswith(("PARKWAY_", "BENCH_WHAT_IF"))]:
        del os.environ[key]
    os.environ.update(env)
    return Services(
        db_name=args.db_name,
        database_url=url,
        broker_url=broker,
        out_dir=out_dir,
        env=env,
        loglevel=args.worker_loglevel,
    )


def hold_the_machine() -> str | None:
    """Take the machine-wide bench lock; the reason it is taken when another run holds it. Two runs at
    once share the cores (and, by default, the database and the broker index): both runs' figures would
    be wrong, and one's cleanup would break the other."""
    from parkway.locks import hold_for_life

    holder = hold_for_life(MACHINE_LOCK, f"pid {os.getpid()}, started {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC")
    if holder is None:
        return None
    return f"another bench run holds {MACHINE_LOCK} ({holder}); wait for it or stop it"


def migrate(url: str) -> None:
    """Bring a second bench database (the sweep's, the scale case's) to the current schema."""
    from sqlalchemy import create_engine

    from parkway.migrate import upgrade

    engine = create_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()


def take_the_machine(prog: str) -> bool:
    """``hold_the_machine`` (a line saying why not when another run holds it), then the cleanup installed."""
    busy = hold_the_machine()
    if busy is not None:
        log(f"{prog} refused: {busy}")
        return False
    harness.install_cleanup()
    return True


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not take_the_machine("bench"):
        return 2
    if args.ab is not None:
        from bench.ab import measure

        log(f"bench --ab: after = {ROOT}, before = {args.ab}; {args.reps} reps, N={args.n}")
        return measure([("after", ROOT), ("before", args.ab.resolve())], args)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = OUT / f"run-{stamp}"
    if args.private_redis:
        redis_url, redis_index = harness.start_private_redis(out_dir), 0
    else:
        redis_url, redis_index = harness.REDIS_HOST_URL, harness.claim_redis_db(args.redis_db)
    services = prepare_environment(args, f"{redis_url}/{redis_index}", out_dir)
    sweep_db, scale_db = f"{args.db_name}_sweep", f"{args.db_name}_scale"
    if args.what_if:
        log(f"WHAT-IF run ({args.what_if}): Parkway is modified in the bench's processes; not Parkway's figures")
    log(
        f"bench: database {args.db_name}, broker {services.broker_url}, logs in "
        f"{services.out_dir.relative_to(ROOT)}; cases {', '.join(args.cases)}"
    )
    results: dict[str, Any] = {"started_at": stamp, "args": vars(args), "broker": services.broker_url}
    bench = None
    code = 0
    try:
        harness.create_database(args.db_name)
        from parkway.db import get_engine
        from parkway.migrate import upgrade

        revision = upgrade(get_engine())
        log(f"database migrated to {revision}")
        if "no-foreign-keys" in args.what_if.split(","):
            harness.drop_foreign_keys(get_engine())
        if "no-event-rows" in args.what_if.split(","):
            harness.discard_event_rows(get_engine())
        # Only now: these import the Celery app, which reads the settings at import.
        from bench import cases, seed

        services.flush_broker()
        token = seed.setup_actors()
        bench = cases.Bench(args=args, services=services, http_token=token)
        results["machine"] = machine(services)
        log(
            f"machine: {results['machine']['nproc']} CPUs ({results['machine']['cpu']}), "
            f"{results['machine']['memory_gb']} GB, Python {results['machine']['python']}, PostgreSQL "
            f"{results['machine']['postgresql']}, Redis {results['machine']['redis']}"
        )
        load = os.getloadavg()
        results["load_at_start"] = load
        if load[0] > 0.7 * (os.cpu_count() or 1):
            log(
                f"WARNING: load average {load[0]:.2f} on {os.cpu_count()} CPUs: something else is running; "
                "absolute figures will be low and noisy (the ratios, measured side by side, less so)"
            )
        if "anatomy" in args.cases:
            cases.case_anatomy(bench, samples=20 if args.quick else 50)
        if {"throughput", "latency", "sealing"} & set(args.cases):
            services.start_worker()
            time.sleep(1.0)  # let the startup sweep pass
            cases.case_memory(bench, "at start (idle)")
            bench.check_foreign("at start")
        if "throughput" in args.cases:
            cases.case_throughput(bench)
            bench.check_foreign("after throughput")
            cases.case_memory(bench, "after throughput")
        if "sealing" in args.cases:
            from bench.cases.sealing import case_sealing

            case_sealing(bench)
        if "latency" in args.cases:
            cases.case_latency(bench)
            capacity = bench.metrics.get(("throughput", "Parkway answer→consume (Python)"))
            if capacity is not None and capacity.values:
                below = round(0.5 * statistics.median(capacity.values))
                if 0 < below < args.latency_rate:
                    cases.case_latency(bench, rate=float(below))
            bench.check_foreign("after latency")
        if "recovery" in args.cases:
            cases.case_recovery(bench)
            bench.check_foreign("after recovery")
        services.stop_workers()
        if "broker_down" in args.cases:  # no worker: the answering side alone
            from bench.broker_down import case_broker_down

            case_broker_down(bench)
        if "sweep" in args.cases:
            harness.create_database(sweep_db)
            sweep_url = harness.database_url(sweep_db)
            migrate(sweep_url)
            cases.case_sweep(bench, sweep_url)
        if "scale" in args.cases:
            from bench.cases.scale import case_scale

            harness.create_database(scale_db)
            scale_url = harness.database_url(scale_db)
            migrate(scale_url)
            case_scale(bench, scale_url)
        if "webhooks" in args.cases:
            from bench.cases.webhooks import case_webhooks

            case_webhooks(bench)
        if "remote" in args.cases:
            from bench.cases.remote import case_remote

            case_remote(bench)
        if "bare" in args.cases:
            from bench.ab import measure

            sweep = {
                f"sweep {m.name.removeprefix('ratio ')}": statistics.median(m.values)
                for m in bench.metrics.values()
                if m.case == "sweep" and m.name.startswith("ratio") and m.values
            }
            log("== bare: Parkway through its public entry points beside a bare Celery app (bench.bare)")
            measure([("parkway", ROOT)], args, extra=sweep)
    except KeyboardInterrupt:
        log("interrupted")
        code = 130
    except Exception as exc:
        import traceback

        traceback.print_exc()
        log(f"bench failed: {type(exc).__name__}: {exc}")
        results["error"] = f"{type(exc).__name__}: {exc}"
        code = 1
    finally:
        harness.cleanup()
        with contextlib.suppress(Exception):
            services.flush_broker()
        from parkway.db import reset_engine

        reset_engine()
        if not args.keep_db:
            for name in (args.db_name, sweep_db, scale_db):
                try:
                    harness.drop_database(name)
                except Exception as exc:
                    log(f"could not drop {name}: {exc}")
    if bench is not None:
        rank = {
            "anatomy": 0, "throughput": 1, "cpu": 2, "memory": 3, "latency": 4, "recovery": 6, "sweep": 7, "scale": 8,
            "webhooks": 9, "remote": 10,
        }  # fmt: skip
        metrics = sorted(bench.metrics.values(), key=lambda m: rank.get(m.case, 5))  # stable within a case
        from bench.stats import table

        print()
        print(table(metrics))
        for what, why in bench.skipped.items():
            print(f"skipped {what}: {why}")
        results.update(
            finished_at=datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"),
            metrics=[m.as_dict() for m in metrics],
            skipped=bench.skipped,
            raw=bench.raw,
        )
        OUT.mkdir(parents=True, exist_ok=True)
        path = OUT / f"results-{stamp}.json"
        path.write_text(json.dumps(results, indent=2, default=str))
        md = path.with_suffix(".md")
        m = results.get("machine", {})
        md.write_text(
            f"`python -m bench {' '.join(argv if argv is not None else sys.argv[1:])}` at {stamp} "
            f"({m.get('nproc')} CPUs {m.get('cpu')}, {m.get('memory_gb')} GB, Python {m.get('python')}, "
            f"PostgreSQL {m.get('postgresql')}, Redis {m.get('redis')}; load at start "
            f"{results.get('load_at_start')})\n\n{table(metrics)}\n"
        )
        print(f"\nresults: {path.relative_to(ROOT)} (table: {md.name})", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
