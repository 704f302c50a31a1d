"""The decision record as a file (docs/operations.md): NDJSON, a header line, one line per decided wait, then
the checkpoints of the seal that span them, so the file can be verified on its own
(``models.sealing.verify_export``); or CSV, the same rows without the seal. The API streams it and
``parkway decisions export`` writes it: one composition for both."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from models.decisions import Span, decided
from models.seal_reads import spanning
from parkway.crypto import seal_public_key

CSV_COLUMNS = ("interaction_id", "run_id", "workflow", "step_id", "key", "kind", "prompt", "action", "resources",
               "target", "quorum", "status", "level", "decided_by", "asked_at", "decided_at", "expires_at",
               "reason", "responses", "seq")  # fmt: skip


def ndjson(targets: Any | None, span: Span) -> Iterator[str]:
    """The export's lines, each ending in a newline: ``{"export": …}``, the records, ``{"checkpoint": …}``s."""
    yield _line({"export": {**span.header(), "public_key": seal_public_key()}})
    seqs: tuple[int, int] | None = None  # the lowest and highest closing seq of the records
    for record in decided(targets, span):
        seq = record["seq"]
        if seq is not None:
            seqs = (min(seqs[0], seq), max(seqs[1], seq)) if seqs else (seq, seq)
        yield _line(record)
    if seqs is not None:
        yield from (_line({"checkpoint": cp.as_dict()}) for cp in spanning(*seqs))


def csv_rows(targets: Any | None, span: Span) -> Iterator[str]:
    """The same records as CSV rows (``responses`` and ``resources`` as JSON text), a header row first."""
    yield _csv(CSV_COLUMNS)
    for record in decided(targets, span):
        yield _csv([_cell(record[column]) for column in CSV_COLUMNS])


def _line(doc: dict[str, Any]) -> str:
    return json.dumps(doc, ensure_ascii=False) + "\n"


def _cell(value: Any) -> Any:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, list | dict) else value


def _csv(cells: Any) -> str:
    out = io.StringIO()
    csv.writer(out).writerow(["" if c is None else c for c in cells])
    return out.getvalue()
