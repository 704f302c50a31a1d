"""Small statistics and the printed table."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary(values: Sequence[float]) -> dict[str, Any]:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0, "values": []}
    return {
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
        "n": len(vals),
        "values": list(vals),
    }


@dataclass
class Metric:
    """One measured quantity across repetitions, optionally with a target on its value."""

    case: str
    name: str
    unit: str
    values: list[float] = field(default_factory=list)
    target: str | None = None  # e.g. ">= 0.5", "<= 2"
    note: str = ""

    def add(self, value: float | None) -> None:
        if value is not None and not math.isnan(value):
            self.values.append(value)

    def met(self) -> bool | None:
        """Judged on the median; ``None`` without a target or values."""
        if self.target is None or not self.values:
            return None
        op, bound = self.target.split()
        med = statistics.median(self.values)
        return med >= float(bound) if op == ">=" else med <= float(bound)

    def as_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "name": self.name,
            "unit": self.unit,
            "target": self.target,
            "met": self.met(),
            "note": self.note,
            **summary(self.values),
        }


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("x", "ratio"):
        return f"{value:.2f}"
    if unit == "ms":
        return f"{value:.2f}" if value < 10 else f"{value:.1f}"
    if unit in ("s",):
        return f"{value:.3f}" if value < 1 else f"{value:.2f}"
    if unit in ("/s",):
        return f"{value:.0f}"
    if unit == "MB":
        return f"{value:.1f}"
    return f"{value:.3g}"


def table(metrics: Sequence[Metric]) -> str:
    """A Markdown table: case, metric, median, min..max, n, target, verdict."""
    rows = [("case", "metric", "median", "min..max", "n", "target", "")]
    for m in metrics:
        s = summary(m.values)
        verdict = {True: "met", False: "MISSED", None: ""}[m.met()]
        unit = "" if m.unit in ("x", "ratio") else f" {m.unit}"
        rows.append(
            (
                m.case,
                m.name,
                fmt(s["median"], m.unit) + (unit if s["median"] is not None else ""),
                f"{fmt(s['min'], m.unit)}..{fmt(s['max'], m.unit)}" if s["n"] else "-",
                str(s["n"]),
                m.target or "",
                verdict,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("| " + " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) + " |")
        if index == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
