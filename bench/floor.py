"""The durable floor, measured beside the bare baseline: what any durable answer → resume costs at least.

The bare baseline (``bench.bare``'s ``cas``) is one compare-and-set per completion, committed once. A wait
that survives a restart and resumes exactly once needs at least three: the answer committed durably
before the continuation is sent, a claim under a lease (not flushed: a lost claim is claimed again), and
the consume committed durably. The floor makes exactly those (``bench.bare``'s ``resume``), one statement
each in autocommit, on the bare baseline's app and worker, answered from the same producer threads
(``bench.runners.FloorRunner``). It
has no events, no history, no run or step state, no authorization and no projection: Parkway ÷ floor is
what Parkway's own contract costs beyond the durable shape of the work.
"""

from __future__ import annotations

from bench.meter import Sample, cell, ratio_cell

VERSUS_FLOOR = (
    ("in-process answers ÷ floor", "python /s", "floor /s"),
    ("HTTP answers ÷ floor", "http /s", "floor /s"),
    ("CPU per completion (in-process) ÷ floor's", "python CPU total ms", "floor CPU total ms"),
    ("CPU per completion (HTTP) ÷ floor's", "http CPU total ms", "floor CPU total ms"),
)


def report(labels: list[str], samples: dict[str, Sample], base: Sample, kinds: tuple[str, ...]) -> list[str]:
    """The floor's table: each tree ÷ the floor, and the floor beside bare."""
    if not base.get("floor /s"):
        return []
    lines = ["", "Parkway beside the durable floor (bench/floor.py; median (min-max) over reps)", ""]
    lines += ["| figure | " + " | ".join(labels) + " |", "|" + "---|" * (len(labels) + 1)]
    for name, key, floor_key in VERSUS_FLOOR:
        cells = [ratio_cell(samples[t].get(key), base.get(floor_key)) for t in labels]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "| absolute | bare | floor | floor ÷ bare |", "|---|---|---|---|"]
    rows: list[tuple[str, str, int]] = [("completions/s", "/s", 0)]
    rows += [(f"CPU per completion, {kind}, ms", f"CPU {kind} ms", 2) for kind in kinds]
    for name, suffix, digits in rows:
        bare, floor = base.get(f"bare {suffix}"), base.get(f"floor {suffix}")
        lines.append(f"| {name} | {cell(bare, digits)} | {cell(floor, digits)} | {ratio_cell(floor, bare)} |")
    return lines
