"""The remote runner (docs/worker-protocol.md): a body run by a remote worker, its outcome sent over HTTP.

A remote worker leases continuations it serves, runs their bodies itself, and sends the outcome back. Each
step is the executor's (``tasks.executor``), as for every runner: a lease is a claim (its lease id the
execution id) checked by ``executor.drivable``, the answers are unsealed as for a continuation, a release is
``executor.release``, and a completion is ``executor.commit`` with its receipt. The routes
(``api/routes/worker_protocol.py``) only translate.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from models import journal, store
from models.outcome import OUTCOME, Outcome
from models.status import RUN_TERMINAL, ContinuationKind, ToolPhase
from models.tables import ToolCall
from parkway import tracing
from parkway.db import read_statement, single_statement, transaction
from parkway.errors import InvalidOutcome, LeaseLost, NotFound, RunEnded
from parkway.settings import get_settings
from tasks import executor
from tasks.serving import sent_outcome

log = logging.getLogger("parkway.remote")
T = TypeVar("T")


# --------------------------------------------------------------------------- leasing


def worker_row_id(principal_id: str, worker: str) -> str:
    """The registry row of a remote worker: stable for (its principal, the name it gives itself)."""
    return hashlib.sha256(f"remote\0{principal_id}\0{worker}".encode()).hexdigest()[:32]


def split_serves(serves: list[str]) -> tuple[list[str], list[str]]:
    """Step names (bare) and continuation keys (``name@version``) of what a remote worker serves."""
    return sorted({k for k in serves if "@" not in k}), sorted({k for k in serves if "@" in k})


def advertise(principal_id: str, worker: str, serves: list[str]) -> None:
    """A lease call is the remote worker's heartbeat in the registry (``store.advertise``, ``remote``, with its
    principal: work is routed to it only on targets it may lease): the row is rewritten only when what it
    serves changed or its heartbeat is older than a quarter of its TTL, so a busy worker's lease calls and
    completions read it and write nothing. A worker back after its row ran out takes over what was made for
    Celery meanwhile that only remote workers serve (``store.route_to_remote``)."""
    steps, continuations = split_serves(serves)
    ttl_s = get_settings().remote_worker_ttl_s
    advert = store.Advert(id=worker_row_id(principal_id, worker), node=worker, pid=0, steps=tuple(steps),
                          continuations=tuple(continuations), ttl_s=ttl_s, remote=True,
                          refresh_s=ttl_s / 4, principal_id=principal_id)  # fmt: skip
    with single_statement(durable=False) as conn:  # a heartbeat lost in a crash is made again by the next call
        back = store.advertise(conn, advert)
    if back:  # what was made while it was away, for Celery, is its own if only remote workers serve it
        with single_statement() as conn:
            store.route_to_remote(conn, steps=steps, continuations=continuations)


@dataclass(frozen=True)
class Ask:
    """A lease call's question: who asks (its principal and the name it gives itself), what it serves, up to
    how many items, under leases of how long."""

    principal_id: str
    worker: str
    serves: list[str]
    n: int
    lease_s: float


def lease(ask: Ask) -> list[Item]:
    """Advertise what the caller serves, then lease up to ``ask.n`` items due now (``lease_due``)."""
    advertise(ask.principal_id, ask.worker, ask.serves)
    return lease_due(ask) if ask.n else []


@dataclass(frozen=True)
class Item:
    """One leased unit of work, as the protocol hands it out."""

    lease_id: str
    kind: str  # start | resume
    run_id: str
    step_id: str
    attempt: int
    name: str  # the step's name (start) or the continuation's name without its version (resume)
    version: int | None
    key: str  # what the worker serves: the step name, or name@version
    payload: Any
    snapshot: Any
    answers: dict[str, dict[str, Any]] | None
    lease_expires_at: datetime
    traceparent: str | None = None  # the span it was handed out in, when traced: the worker continues it


def lease_due(ask: Ask) -> list[Item]:
    """Up to ``ask.n`` due continuations of the keys served, of runs on targets the caller may lease, each
    under a lease of ``ask.lease_s`` held by the caller, with what their bodies read, in one statement
    (``store.lease``); one that can no longer be driven (its run ended, its owner lost the grant) is given up
    (``executor.drivable``), and not handed out. A lease lost in a database crash is recovered by design, as a
    claim: no WAL-flush wait."""
    steps, continuations = split_serves(ask.serves)
    settings = get_settings()
    with single_statement(durable=False) as conn:
        leased = store.lease(conn, holder=ask.principal_id, steps=steps, continuations=continuations, n=ask.n,
                             lease_s=ask.lease_s, max_attempts=settings.max_attempts)  # fmt: skip
    items = [
        handed_out(held.claim, held.lease_id, held.lease_expires_at)
        for held in leased
        if executor.drivable(held.claim, held.lease_id, _extra(held.claim.continuation.id, held.lease_id))
    ]
    traced = {item.lease_id: item.traceparent for item in items if item.traceparent}
    if traced:  # when traced: each claim's trace, as a Celery claim writes its own (a re-drive links to it)
        with single_statement(durable=False) as conn:
            store.trace_leases(conn, traced)
    return items


def handed_out(claim: store.Claim, lease_id: str, lease_expires_at: datetime) -> Item:
    """``item_of`` in a span of its own (a new trace, linked as a Celery execution's: ``executor.traced``),
    ended as the item is handed out; the item carries its ``traceparent``, which the worker sends back on
    its lease's calls, so they continue that trace."""
    with tracing.span("parkway.lease", kind="consumer", root=True, follows=claim.follows, lease_id=lease_id):
        executor.traced(claim)
        return item_of(claim, lease_id, lease_expires_at, traceparent=tracing.traceparent())


def _extra(continuation_id: str, lease_id: str) -> executor.Extra:
    return {"continuation_id": continuation_id, "execution_id": lease_id}


def item_of(claim: store.Claim, lease_id: str, lease_expires_at: datetime, traceparent: str | None = None) -> Item:
    """The item of a claimed continuation, its answers unsealed (for a lease call, or a push's POST)."""
    row = claim.continuation
    resume = row.kind == ContinuationKind.RESUME
    name, _, version = row.name.partition("@")
    answers = {
        key: {
            "status": a.status,
            "value": a.value,
            "approved": a.approved,
            "answered_by": a.answered_by,
            "responses": [
                {"principal": r.principal, "value": r.value, "at": r.at, "level": r.level} for r in a.responses
            ],
        }
        for key, a in executor.unsealed(claim.answers).items()
    }
    return Item(lease_id=lease_id, kind=row.kind, run_id=row.run_id, step_id=row.step_id,
                attempt=max(row.attempts, 1), name=name, version=int(version) if resume and version else None,
                key=row.name, payload=None if resume else claim.step.payload,
                snapshot=claim.step.snapshot if resume else None, answers=answers if resume else None,
                lease_expires_at=lease_expires_at, traceparent=traceparent)  # fmt: skip


# --------------------------------------------------------------------------- a lease's calls
# Each is answered only for the lease's holder (``store.held_by``): another principal, an admin too, gets
# ``NotFound`` (404) and nothing changes.


def held(lease_id: str, holder: str) -> store.LeaseState:
    """The lease's state when it holds its work live; raises ``RunEnded`` (410) when its run ended,
    ``LeaseLost`` (409) when it holds it no more, ``NotFound`` when ``holder`` holds no lease of that id."""
    with single_statement() as conn:
        state = store.lease_state(conn, lease_id, holder)
    return _holding(lease_id, state)


def _mine(lease_id: str, found: T | None) -> T:
    """What the holder's read of the lease found; ``NotFound`` (404) when the lease is none of the caller's."""
    if found is None:
        raise NotFound(f"lease {lease_id} is not one of the caller's")
    return found


def _holding(lease_id: str, state: store.LeaseState | None) -> store.LeaseState:
    state = _mine(lease_id, state)
    if state.held:
        return state
    if state.run_status in RUN_TERMINAL:
        raise RunEnded(f"run {state.run_id} of lease {lease_id} is {state.run_status}", state.as_dict())
    raise LeaseLost(f"lease {lease_id} no longer holds continuation {state.continuation_id}", state.as_dict())


def heartbeat(lease_id: str, holder: str, *, lease_s: float) -> datetime:
    """The holder's lease extended to ``lease_s`` from now (``store.renew_lease``); raises as ``held``."""
    state = held(lease_id, holder)
    with single_statement(durable=False) as conn:
        expires = store.renew_lease(conn, state.continuation_id, execution_id=lease_id, lease_s=lease_s)
    if expires is None:
        held(lease_id, holder)  # raises: it holds it no more
        raise LeaseLost(f"lease {lease_id} was not renewed")  # pragma: no cover - lost between the two reads
    return expires


def release(lease_id: str, holder: str, reason: str | None) -> store.LeaseState:
    """claimed -> ready by the lease's holder, the attempt spent (``executor.release``); out of attempts, the
    run is interrupted as after a crash loop. Returns the state after; raises as ``held``."""
    state = held(lease_id, holder)
    why = f"released by its remote worker: {reason}" if reason else "released by its remote worker"
    if executor.release(state.continuation_id, lease_id, why, _extra(state.continuation_id, lease_id)) == "lost":
        held(lease_id, holder)  # raises: lost since
    with single_statement() as conn:
        return _mine(lease_id, store.lease_state(conn, lease_id, holder))


# --------------------------------------------------------------------------- completing


def digest(outcome: Outcome) -> str:
    return hashlib.sha256(store.canonical_json(OUTCOME.dump_python(outcome, mode="json")).encode()).hexdigest()


@dataclass(frozen=True)
class Completed:
    """A completion's answer: its receipt, and the next items its ``lease`` took (none on an exact retry)."""

    receipt: store.Receipt
    items: list[Item]


def complete(lease_id: str, holder: str, outcome: Outcome, then: Ask | None = None) -> Completed:
    """The outcome committed exactly once for the holder's lease (``store.commit_outcome``, with its receipt);
    the exact retry returns the same receipt. ``then``: lease the next items after the commit, only in the
    call that committed (a retry's answer carries none: the items of a lost answer come back when their
    leases run out). Raises ``InvalidOutcome`` or ``ParkRefused`` (nothing committed, lease kept),
    ``NotFound``, ``LeaseLost`` or ``RunEnded``, and leases nothing then."""
    sent = digest(outcome)
    with read_statement() as conn:
        found = store.held_claim(conn, lease_id, holder)
    state, claim = _mine(lease_id, found)
    if not state.held:  # completed already (the exact retry?), or lost
        earlier = _receipt(lease_id, sent)
        if earlier is not None:
            return Completed(earlier, [])
        _holding(lease_id, state)  # raises
    checked = sent_outcome(outcome, f"remote {state.kind} {state.name}")
    committed = executor.commit(claim, checked, lease_id, _extra(state.continuation_id, lease_id),
                                completion=store.Completion(lease_id, sent), raise_refused=True)  # fmt: skip
    if committed is None or committed.receipt is None:
        return Completed(_receipt(lease_id, sent) or _lost(lease_id, holder), [])
    return Completed(committed.receipt, lease(then) if then is not None else [])


def _receipt(lease_id: str, sent: str) -> store.Receipt | None:
    """The lease's receipt when it completed with this outcome; ``LeaseLost`` when with another."""
    with single_statement() as conn:
        receipt = store.receipt_of(conn, lease_id)
    if receipt is None or receipt.outcome_digest == sent:
        return receipt
    state = {"run_id": receipt.run_id, "outcome": receipt.outcome, "run_status": receipt.run_status}
    raise LeaseLost(f"lease {lease_id} was completed with another outcome ({receipt.outcome})", state)


def _lost(lease_id: str, holder: str) -> store.Receipt:
    held(lease_id, holder)  # raises
    raise LeaseLost(f"lease {lease_id} lost its claim before the commit")  # pragma: no cover


# --------------------------------------------------------------------------- tools


@dataclass(frozen=True)
class ToolState:
    """What a remote worker does with a tool call: ``run`` it now, or it has ``settled`` (do not run)."""

    state: str
    result: Any = None
    error: str | None = None
    possibly_ran: bool = False


def _settled(row: Any) -> ToolState:
    return ToolState("settled", row.outcome, row.error, bool(row.possibly_ran))


def tool_intent(lease_id: str, holder: str, *, name: str, key: str, args: Any, replay: str) -> ToolState:
    """The intent journaled by the lease before the effect, only while the holder's lease holds its work
    (``holds_live_claim``): ``run``, or the recorded outcome when it settled, or possibly-ran for a ``never``
    call an earlier lease left executing (``journal.start_executing``: the Python SDK's rule)."""
    state = held(lease_id, holder)
    with transaction() as session:
        if not store.holds_live_claim(session, lease_id):
            raise LeaseLost(f"lease {lease_id} no longer holds its work")
        row, created = journal.record_intent(
            session, run_id=state.run_id, journal_step_id=state.step_id, key=key, name=name,
            digest=journal.args_digest(args), replay=replay, phase=ToolPhase.EXECUTING, interaction_id=None,
            journaled_by=lease_id,
        )  # fmt: skip
        if (row.name, row.args_digest) != (name, journal.args_digest(args)):
            raise InvalidOutcome(f"tool call {key} was journaled as {row.name} with other arguments; it is not run")
        if row.phase == ToolPhase.SETTLED:
            return _settled(row)
        if row.phase != ToolPhase.EXECUTING:
            raise InvalidOutcome(f"tool call {key} is {row.phase}: permission preflight is not offered over HTTP")
        if journal.start_executing(session, row.id, created=created, replay=replay, journaled_by=lease_id):
            return ToolState("run")
        return ToolState("settled", None, journal.POSSIBLY_RAN, True)


def tool_outcome(lease_id: str, holder: str, key: str, *, result: Any = None, error: str | None = None) -> ToolState:
    """executing -> settled with what ran, only under the holder's lease that journaled the call (the one that
    last started it: ``journaled_by``); not fenced by the claim (as in ``tasks.tools``: what ran is recorded
    even by a lease lost meanwhile, unless the call settled first). ``NotFound`` for a call that lease did not
    journal, ``LeaseLost`` when it had settled otherwise."""
    with transaction() as session:
        state = _mine(lease_id, store.lease_state(session, lease_id, holder))
        call_id = journal.tool_call_id(state.step_id, key)
        found = session.get(ToolCall, call_id, with_for_update=True)  # held: no other lease journals it meanwhile
        if found is None or found.journaled_by != lease_id:
            raise NotFound(f"tool call {key} has no intent journaled under lease {lease_id}")
        row = journal.settle(session, call_id, from_=ToolPhase.EXECUTING, outcome=result, error=error)
        if row is not None:
            return _settled(row)
        if (found.outcome, found.error, found.possibly_ran) == (result, error, False):
            return _settled(found)  # the exact retry
        raise LeaseLost(f"tool call {key} is {found.phase} already", {"phase": found.phase,
                        "possibly_ran": found.possibly_ran, "error": found.error})  # fmt: skip
