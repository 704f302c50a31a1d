"""``python -m bench.waterfall SPANS.json OUT.png``: one decision's spans as a waterfall, rendered by headless
Chromium. SPANS.json: a list of spans as tests/acceptance/otlp_receiver.py decodes them (name, service,
trace_id, span_id, parent, start_ns, end_ns, attributes, links). Each trace is a band; a link is named on
the span that has it. Time is compressed between traces: the waits between them are shown as a gap."""

from __future__ import annotations

import html
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROW_PX, WIDTH_PX, LABEL_PX = 22, 1100, 430


def _rows(spans: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """(depth, span) in trace order (by first start), each span after its parent."""
    by_parent: dict[str, list[dict[str, Any]]] = {}
    ids = {s["span_id"] for s in spans}
    for s in sorted(spans, key=lambda s: s["start_ns"]):
        by_parent.setdefault(s["parent"] if s["parent"] in ids else "", []).append(s)
    out: list[tuple[int, dict[str, Any]]] = []

    def walk(parent: str, depth: int) -> None:
        for s in by_parent.get(parent, []):
            out.append((depth, s))
            walk(s["span_id"], depth + 1)

    walk("", 0)
    return out


def page(spans: list[dict[str, Any]]) -> str:
    rows = _rows(spans)
    names = {s["span_id"]: s["name"] for s in spans}
    lo = min(s["start_ns"] for s in spans)
    hi = max(s["end_ns"] for s in spans)
    scale = (WIDTH_PX - LABEL_PX - 20) / max(hi - lo, 1)
    lines = []
    for n, (depth, s) in enumerate(rows):
        left = LABEL_PX + (s["start_ns"] - lo) * scale
        width = max(2.0, (s["end_ns"] - s["start_ns"]) * scale)
        ms = (s["end_ns"] - s["start_ns"]) / 1e6
        linked = ", ".join(names.get(span, "(not received)") for _, span in s["links"])
        label = f"{'&nbsp;' * 3 * depth}{html.escape(s['name'])} <i>{html.escape(s['service'])}</i>"
        tip = f"{ms:.1f} ms" + (f" · links → {html.escape(linked)}" if linked else "")
        hue = int(s["trace_id"][:6], 16) % 360
        lines.append(
            f'<div class="row" style="top:{n * ROW_PX}px"><span class="label">{label}</span>'
            f'<span class="bar" style="left:{left:.0f}px;width:{width:.0f}px;background:hsl({hue},60%,55%)"></span>'
            f'<span class="tip" style="left:{left + width + 4:.0f}px">{tip}</span></div>'
        )
    height = len(rows) * ROW_PX + 40
    return f"""<html><head><style>
body {{ font: 12px sans-serif; margin: 10px; }} .row {{ position: absolute; height: {ROW_PX}px; width: {WIDTH_PX}px; }}
.label {{ position: absolute; left: 0; width: {LABEL_PX}px; overflow: hidden; white-space: nowrap; }}
.bar {{ position: absolute; top: 4px; height: 12px; border-radius: 2px; }}
.tip {{ position: absolute; top: 2px; color: #444; white-space: nowrap; }}
</style></head><body><h3>One decision: {len(spans)} spans in {len({s["trace_id"] for s in spans})} traces
(colour: trace; a resume's links name the park and the answer)</h3>
<div style="position:relative;height:{height}px">{"".join(lines)}</div></body></html>"""


def compress(spans: list[dict[str, Any]], gap_ns: int = 20_000_000) -> list[dict[str, Any]]:
    """Each trace moved to start ``gap_ns`` after the one before ends: a wait of days is a small gap."""
    traces: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        traces.setdefault(s["trace_id"], []).append(s)
    at, out = 0, []
    for group in sorted(traces.values(), key=lambda g: min(s["start_ns"] for s in g)):
        first = min(s["start_ns"] for s in group)
        for s in group:
            out.append({**s, "start_ns": s["start_ns"] - first + at, "end_ns": s["end_ns"] - first + at})
        at = max(s["end_ns"] for s in out) + gap_ns
    return out


def main(source: str, target: str) -> None:
    spans = compress(json.loads(Path(source).read_text()))
    with tempfile.TemporaryDirectory() as tmp:
        page_path = Path(tmp) / "waterfall.html"
        page_path.write_text(page(spans))
        height = len(spans) * ROW_PX + 100
        shot = f"--screenshot={Path(target).resolve()}"
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", shot,
                        f"--window-size={WIDTH_PX + 250},{height}", page_path.as_uri()], check=True,
                       capture_output=True, timeout=120)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
