"""PostgreSQL's CPU per completion of two trees, paired: ``python -m bench.pgpair ADMIN_URL TREE_A TREE_B``.

One process per tree: this file, run in the tree with the tree first on ``PYTHONPATH`` (its code; this file's
own ``bench/statements.py`` helpers, so a tree older than this file can be measured). Each makes its own
scratch database on the server of ``ADMIN_URL`` with nothing tracked (``pg_stat_statements`` and
``track_functions`` off there), parks its steps, warms up, then answers and resumes them in-process (as
``bench.statements`` does) in chunks, on command: A then B, B then A, and so on. Each chunk's CPU of the
database's backends (``/proc/<pid>/schedstat``, nanoseconds) and of the tree's process is read around it. On a
shared host the one-run figures move with the load by more than a change; chunks seconds apart, paired, see
the same load: read the median of B ÷ A per pair.

``--with-b webhook,push,remote``: tree B's database holds those features, unused by the plain path (an idle
webhook subscription, a push handler and a remote worker for another key, as ``bench.statements --with``);
with the same tree as A and B this is issue 42 item 3's check that a feature not used costs nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

WARM_UP = 50
# This file's own helpers (not the tree's): the scratch database's statements and the completions.
_STATEMENTS = runpy.run_path(str(Path(__file__).with_name("statements.py")))
_admin, completions = _STATEMENTS["_admin"], _STATEMENTS["completions"]
FEATURES, unused_features = _STATEMENTS["FEATURES"], _STATEMENTS["_unused_features"]


def _backends(admin_url: str, name: str) -> dict[int, float]:
    """CPU time (ms) of each backend connected to the database ``name``."""
    pids = [r[0] for r in _admin(admin_url, "SELECT pid FROM pg_stat_activity WHERE datname = %s", name)]
    return {pid: int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e6 for pid in pids}


def side(admin_url: str, chunk: int, chunks: int, features: list[str]) -> None:
    """One tree's side (run in the tree): ``ready``, then a chunk per line read, its two figures written."""
    with scratch(admin_url, "pgpair") as name:
        _run_side(admin_url, name, chunk, chunks, features)


@contextlib.contextmanager
def scratch(admin_url: str, kind: str) -> Iterator[str]:
    """A scratch database of its own, nothing tracked in it, dropped after the block (this process's engine
    first): its name."""
    name = f"parkway_{kind}_{uuid.uuid4().hex[:8]}"
    _admin(admin_url, f'CREATE DATABASE "{name}"')
    for setting in ("pg_stat_statements.track = 'none'", "pg_stat_statements.track_planning = off",
                    "track_functions = 'none'"):  # fmt: skip
        _admin(admin_url, f'ALTER DATABASE "{name}" SET {setting}')
    try:
        yield name
    finally:
        from parkway.db import reset_engine

        reset_engine()
        _admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _run_side(admin_url: str, name: str, chunk: int, chunks: int, features: list[str]) -> None:
    _STATEMENTS["use_scratch"](admin_url, name)
    from bench import seed

    seed.setup_actors()
    unused_features(features)
    parked = seed.seed_parked(WARM_UP + chunk * chunks)
    completions(parked[:WARM_UP])
    print("ready", flush=True)
    for k in range(chunks):
        sys.stdin.readline()
        start, began = _backends(admin_url, name), time.process_time()
        completions(parked[WARM_UP + k * chunk : WARM_UP + (k + 1) * chunk])
        client, end = time.process_time() - began, _backends(admin_url, name)
        backends = sum(end.values()) - sum(start.get(pid, 0.0) for pid in end)
        print(f"{backends / chunk:.4f} {client * 1000 / chunk:.4f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("admin_url", help="a database URL of the server, as a superuser (libpq form)")
    parser.add_argument("tree_a")
    parser.add_argument("tree_b")
    parser.add_argument("--chunk", type=int, default=100, help="completions per chunk (default 100)")
    parser.add_argument("--pairs", type=int, default=30, help="chunks of each tree (default 30)")
    parser.add_argument("--with-b", dest="features", default="", help="comma-separated, in B's data: "
                        + ", ".join(FEATURES))  # fmt: skip
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    features = [f.strip() for f in args.features.split(",") if f.strip()]
    if set(features) - set(FEATURES):
        parser.error(f"--with-b: one of {', '.join(FEATURES)}")
    if args.side:
        side(args.admin_url, args.chunk, args.pairs, features)
        return 0
    command = [sys.executable, __file__, args.admin_url, "-", "-", "--side", "--chunk", str(args.chunk),
               "--pairs", str(args.pairs)]  # fmt: skip
    sides = [subprocess.Popen([*command, "--with-b", ",".join(features) if label == "B" else ""], cwd=tree,
                              env={**os.environ, "PYTHONPATH": str(Path(tree).resolve())},
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for label, tree in (("A", args.tree_a), ("B", args.tree_b))]  # fmt: skip
    for process in sides:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    figures: list[list[tuple[float, float]]] = [[], []]
    for k in range(args.pairs):
        for i in (0, 1) if k % 2 == 0 else (1, 0):
            figures[i].append(_chunk(sides[i]))
    for process in sides:
        assert process.stdin is not None
        process.stdin.close()
        process.wait()
    if features:
        print(f"B's data holds, unused by the plain path: {', '.join(features)}")
    _report(*figures)
    return 0


def _chunk(process: subprocess.Popen[Any]) -> tuple[float, float]:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("go\n")
    process.stdin.flush()
    backends, client = process.stdout.readline().split()
    return float(backends), float(client)


LABELS = (("PostgreSQL's backends", 0), ("the tree's process", 1))  # each chunk's figures, in the order sent


def _report(a: list[tuple[float, float]], b: list[tuple[float, float]], labels: Any = LABELS) -> None:
    for label, i in labels:
        xs, ys = [x[i] for x in a], [y[i] for y in b]
        ratios = [y / x for x, y in zip(xs, ys, strict=True) if x > 0]
        spread = [f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})" for v in (xs, ys, ratios)]
        print(
            f"{label}, ms per completion: A {spread[0]}, B {spread[1]}; B ÷ A per pair {spread[2]}, {len(ratios)} pairs"
        )


if __name__ == "__main__":
    raise SystemExit(main())
