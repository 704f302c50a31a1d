"""CPU per in-process answer: of the answering process and of its PostgreSQL backends, counts of /proc.

``python -m bench.answercpu ADMIN_URL [N]`` makes a scratch database on the server of ``ADMIN_URL``, parks
N + 50 steps (``bench.seed``), answers 50 (``tasks.sdk.answer``, not counted: connections made, plans and
schemas cached), then N more, and prints the CPU this process and the database's backends (those connected
at the end; their CPU before the N counted only for those connected then) used per answer. No worker runs:
the answer alone. Run it from the tree to measure (``cd <tree> && python -m bench.answercpu ...``),
alternating trees in one sitting: compare only ratios of one run (the machine is shared).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg

WARM_UP = 50


def _backends(admin_url: str, name: str) -> dict[int, float]:
    """CPU (ms, user + system) of each backend connected to the database ``name``."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (name,))]
    used: dict[int, float] = {}
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        used[pid] = (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")
    return used


def main() -> int:
    admin_url, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    name = f"parkway_answercpu_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        info = psycopg.conninfo.conninfo_to_dict(admin_url)
        server = f"{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}"
        os.environ.update(PARKWAY_DATABASE_URL=f"postgresql+psycopg://{server}/{name}",
                          PARKWAY_SECRET_KEY=uuid.uuid4().hex * 2,
                          PARKWAY_BROKER_URL=os.environ.get("BENCH_ANSWERCPU_BROKER_URL", "redis://127.0.0.1:6379/12"),
                          PARKWAY_WORKSPACE_DIR=os.path.join("var", "bench-answercpu", name))  # fmt: skip
        subprocess.run([sys.executable, "-m", "parkway.cli", "migrate"], check=True, capture_output=True)
        from bench import seed
        from parkway.db import reset_engine
        from tasks import sdk

        seed.setup_actors()
        parked = seed.seed_parked(n + WARM_UP)
        for p in parked:
            if p is parked[WARM_UP]:
                start, began = _backends(admin_url, name), time.process_time()
            sdk.answer(p.interaction_id, "yes", response_id=uuid.uuid4().hex, principal=seed.HUMAN)
        client, end = time.process_time() - began, _backends(admin_url, name)
        backends = sum(end.values()) - sum(start.get(pid, 0.0) for pid in end)
        print(f"{n} answers: this process {client * 1000 / n:.3f} ms, the database's backends {backends / n:.3f} ms"
              f" per answer ({len(end)} backends)")  # fmt: skip
        reset_engine()
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
