"""The seal of the event log, as pure functions (docs/operations.md, "The seal"): what an event and its decision
hash to, how a checkpoint chains and is signed, and where a sealed checkpoint and what is there now differ.
The sweep seals with them (``models.store.seals``), and both verifiers check with them: the live tables
(``models.seal_reads``) and an exported file (``verify_export``), so there is one rule for each.

An entry is ``[seq, event digest, decision digest, target, decided_at]``: the last three are ``null`` but for
an event that closed a wait (its decision record, ``models.decisions``). A checkpoint's ``hash`` is the chain
``h = sha256(h + canonical(entry))`` over its entries, from the previous checkpoint's ``hash`` (``GENESIS``
for the first); its Ed25519 signature covers ``signed_part``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from models.jsonsafe import canonical_json
from parkway.crypto import signed_by

GENESIS = "0" * 64
Entry = list[Any]


def digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def event_doc(seq: int, run_id: str, type_: str, at: datetime, data: Any) -> dict[str, Any]:
    """What an event's digest covers: every column of its row."""
    return {"seq": seq, "run_id": run_id, "type": type_, "at": at.isoformat(), "data": data}


def entry(event: dict[str, Any], decision: dict[str, Any] | None) -> Entry:
    """An event's entry (``decision``: the record of the wait it closed, if it closed one)."""
    if decision is None:
        return [event["seq"], digest(event), None, None, None]
    return [event["seq"], digest(event), digest(decision), decision["target"], decision["decided_at"]]


def chained(prev: str, entries: Iterable[Entry]) -> str:
    h = bytes.fromhex(prev)
    for e in entries:
        h = hashlib.sha256(h + canonical_json(e).encode()).digest()
    return h.hex()


@dataclass
class Checkpoint:
    """One seal, as stored and as exported (``models.record_tables.Seal``)."""

    position: int
    after_seq: int
    last_seq: int
    count: int
    prev: str
    hash: str
    signature: str
    entries: list[Entry]

    def signed_part(self) -> bytes:
        fields = ("position", "after_seq", "last_seq", "count", "prev", "hash")
        return canonical_json({name: getattr(self, name) for name in fields}).encode()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Finding:
    """Where a verification failed: the first bad ``seq`` (``None`` when no one event is to blame) and why."""

    seq: int | None
    problem: str


@dataclass
class Verdict:
    """What a verification found: ``ok`` unless ``finding``; how much it checked."""

    checkpoints: int = 0
    events: int = 0
    decisions: int = 0
    sealed_through: int | None = None  # the last sealed seq it checked
    unsealed: int = 0  # decisions (of a file) decided after the last checkpoint it carries: not checked
    finding: Finding | None = None
    public_key: str = ""

    @property
    def ok(self) -> bool:
        return self.finding is None

    def as_dict(self) -> dict[str, Any]:
        bad = self.finding
        return {"ok": self.ok, "first_bad_seq": bad.seq if bad else None, "problem": bad.problem if bad else None,
                **{k: v for k, v in asdict(self).items() if k != "finding"}}  # fmt: skip


def checkpoint_problem(cp: Checkpoint, previous: Checkpoint | None, public_key: str) -> Finding | None:
    """Whether ``cp`` is a seal as made: signed by ``public_key``, following ``previous`` (when known) with
    no gap, and its entries hashing to its ``hash`` within its range."""
    where = f"checkpoint {cp.position}"
    if not signed_by(public_key, cp.signed_part(), cp.signature):
        return Finding(None, f"{where} is not signed by the seal key {public_key}")
    if previous is not None and (previous.position + 1, previous.hash, previous.last_seq) != (
        cp.position,
        cp.prev,
        cp.after_seq,
    ):
        return Finding(None, f"{where} does not follow checkpoint {previous.position}: a checkpoint is missing")
    seqs = [e[0] for e in cp.entries]
    in_order = all(a < b for a, b in itertools.pairwise(seqs))
    if not seqs or not in_order or seqs[0] <= cp.after_seq or seqs[-1] != cp.last_seq or len(seqs) != cp.count:
        return Finding(None, f"{where} lists other events than it says it covers")
    if chained(cp.prev, cp.entries) != cp.hash:
        return Finding(None, f"{where}'s entries were changed: they do not hash to its signed hash")
    return None


def first_difference(sealed: list[Entry], live: list[Entry]) -> Finding | None:
    """The first ``seq`` at which what is there now (``live``, in ``seq`` order) differs from what was sealed."""
    now = {e[0]: e for e in live}
    before = {e[0]: e for e in sealed}
    for seq in sorted(now.keys() | before.keys()):
        was, got = before.get(seq), now.get(seq)
        if was is None:
            return Finding(seq, f"event {seq} was added after its range was sealed")
        if got is None:
            return Finding(seq, f"event {seq} was removed after it was sealed")
        if was[1] != got[1]:
            return Finding(seq, f"event {seq} was changed after it was sealed")
        if was[2:] != got[2:]:
            return Finding(seq, f"the decision event {seq} closed was changed after it was sealed")
    return None


# --------------------------------------------------------------------------- an exported file


@dataclass
class Export:
    """An export as read back: its header (``since``, ``until``, ``target``), decisions and checkpoints."""

    header: dict[str, Any] = field(default_factory=dict)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)


def read_export(lines: Iterable[str]) -> Export:
    found = Export()
    for line in lines:
        if not line.strip():
            continue
        doc = json.loads(line)
        if "export" in doc:
            found.header = doc["export"]
        elif "checkpoint" in doc:
            found.checkpoints.append(Checkpoint(**doc["checkpoint"]))
        else:
            found.decisions.append(doc)
    return found


def verify_export(export: Export, public_key: str) -> Verdict:
    """Whether the file's checkpoints are seals as made, chained, and its decisions exactly those they sealed
    for its filter: none changed, added or removed. A decision decided after its last checkpoint is counted
    as ``unsealed``, not judged."""
    verdict = Verdict(public_key=public_key)
    previous = None
    sealed: dict[int, Entry] = {}
    for cp in export.checkpoints:
        verdict.finding = checkpoint_problem(cp, previous, public_key)
        if verdict.finding is not None:
            return verdict
        verdict.checkpoints += 1
        verdict.events += cp.count
        verdict.sealed_through = cp.last_seq
        sealed.update((e[0], e) for e in cp.entries)
        previous = cp
    verdict.finding = _decisions_problem(export, sealed, verdict)
    return verdict


def _decisions_problem(export: Export, sealed: dict[int, Entry], verdict: Verdict) -> Finding | None:
    lowest = export.checkpoints[0].after_seq if export.checkpoints else 0
    listed = set()
    for decision in export.decisions:
        seq = decision.get("seq")
        if not isinstance(seq, int) or verdict.sealed_through is None or seq > verdict.sealed_through:
            verdict.unsealed += 1
            continue
        listed.add(seq)
        found = sealed.get(seq)
        if found is None or found[2] is None:
            return Finding(seq, f"the decision closed by event {seq} is not one the seal holds: added")
        if found[2] != digest(decision):
            return Finding(seq, f"the decision closed by event {seq} was changed after it was sealed")
        verdict.decisions += 1
    for seq in sorted(seq for seq, e in sealed.items() if e[2] is not None and seq > lowest and seq not in listed):
        if _in_filter(export.header, sealed[seq]):
            return Finding(seq, f"the decision closed by event {seq} was sealed but is not in the file: removed")
    return None


def _in_filter(header: dict[str, Any], sealed: Entry) -> bool:
    """Whether a sealed decision falls in the export's ``since``/``until``/``target``."""
    target, decided_at = sealed[3], datetime.fromisoformat(sealed[4])
    since, until = (header.get(k) for k in ("since", "until"))
    return (
        header.get("target") in (None, target)
        and (since is None or decided_at >= datetime.fromisoformat(since))
        and (until is None or decided_at < datetime.fromisoformat(until))
    )
