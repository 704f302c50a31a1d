"""How soon a run started by ``parkway run start`` runs its first step (issue 43 item 3), against a running stack.

    PARKWAY_HOME=/path/to/home python -m bench.start_latency [--reps 10] [--parkway [NAME=]EXECUTABLE ...]

Starts ``deploy.plan`` (its first step parks at once) ``--reps`` times with each ``--parkway``, interleaved,
each start once the last one's step has committed; prints, per executable, the median, minimum and maximum
of the time from the run's creation to its first step's commit (both on the database's clock), in seconds.
"""

from __future__ import annotations

import statistics
import subprocess
import time

from bench.cli_times import PAYLOAD, arguments

# When the run was made, and when its first step committed (it left ``running``), on the database's clock.
LATENCY = """
SELECT extract(epoch FROM s.updated_at - r.created_at) FROM runs r JOIN steps s ON s.run_id = r.id AND s.seq = 1
WHERE r.id = %(id)s AND s.status <> 'running'"""


def latency(parkway: str, timeout_s: float = 60.0) -> float:
    from parkway import pgconn

    argv = [parkway, "run", "start", "deploy.plan", "--as", "agent", "--target", "example", "--payload", PAYLOAD]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    run_id = done.stdout.strip()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with pgconn.transaction() as conn:
            row = conn.execute(LATENCY, {"id": run_id}).fetchone()
        if row is not None:
            return float(row[0])
        time.sleep(0.05)
    raise SystemExit(f"run {run_id}: its first step did not commit within {timeout_s} s")


def main() -> int:
    reps, executables = arguments(__doc__)
    took: dict[str, list[float]] = {name: [] for name in executables}
    for _ in range(reps):
        for name, executable in executables.items():
            took[name].append(latency(executable))
    print("| parkway | start -> first step committed, median s | min..max s |")
    print("|---|---|---|")
    for name, values in took.items():
        print(f"| {name} | {statistics.median(values):.3f} | {min(values):.3f}..{max(values):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
