"""Measuring one bench window: CPU per process kind (``Meter``), samples over reps, and their table cells."""

from __future__ import annotations

import statistics

import psycopg

from bench import harness
from bench.harness import proc_cpu_ms

Sample = dict[str, list[float]]


def cpu_by_pid(pids: dict[str, list[int]]) -> dict[str, dict[int, float]]:
    return {kind: {pid: proc_cpu_ms(pid) for pid in group} for kind, group in pids.items()}


class Meter:
    """CPU per process kind over one timed window: the given pids, the database's backends, Redis (the
    bench's private one). A backend that ends inside the window loses its share: they live as long as
    their pools, so that is rare."""

    def __init__(self, pids: dict[str, list[int]], db_name: str) -> None:
        self.pids, self.db_name = dict(pids), db_name
        self.pids["redis"] = [pid for pid in [harness.private_redis_pid()] if pid]

    def backends(self) -> list[int]:
        with psycopg.connect(harness.database_url("postgres").replace("+psycopg", ""), autocommit=True) as conn:
            rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.db_name,)).fetchall()
        return [int(r[0]) for r in rows]

    def __enter__(self) -> Meter:
        self.before = cpu_by_pid({**self.pids, "postgresql": self.backends()})
        return self

    def __exit__(self, *_: object) -> None:
        self.after = cpu_by_pid(
            {**self.pids, "postgresql": sorted(set(self.backends()) | set(self.before["postgresql"]))}
        )

    def per_unit(self, units: int) -> dict[str, float]:
        out = {
            kind: sum(max(0.0, ms - self.before[kind].get(pid, 0.0)) for pid, ms in now.items()) / max(units, 1)
            for kind, now in self.after.items()
        }
        out["total"] = sum(out.values())
        return out


def add(sample: Sample, key: str, value: float | None) -> None:
    if value is not None:
        sample.setdefault(key, []).append(value)


def cell(values: list[float] | None, digits: int = 0) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def ratio_cell(a: list[float] | None, b: list[float] | None) -> str:
    """The ratio of medians, and its range over the reps (each rep's own ratio)."""
    if not a or not b:
        return "-"
    per_rep = [x / y for x, y in zip(a, b, strict=False) if y]
    if not per_rep:
        return "-"
    return cell([statistics.median(a) / statistics.median(b)] if len(per_rep) == 1 else per_rep, 2)
