"""The store: every state transition of Parkway, each a compare-and-set inside the caller's transaction.

Functions take the caller's session and never commit; the caller owns ``with session.begin():`` (see
``parkway.db.transaction``). A transition returns the changed row, or ``None``/``False`` when it lost
the race: losing a race is a normal outcome. Only this module writes state.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, cast

from sqlalchemy import (
    Connection,
    Row,
    String,
    Table,
    and_,
    bindparam,
    exists,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models.access import principal_by_token
from models.base import utcnow
from models.clock import db_now
from models.status import (
    RUN_LIVE,
    RUN_TERMINAL,
    ContinuationKind,
    ContinuationStatus,
    InteractionKind,
    InteractionStatus,
    PrincipalKind,
    ReviewStatus,
    RunStatus,
    StepStatus,
    normalize_run_status,
)
from models.tables import (
    Continuation,
    Event,
    Grant,
    Interaction,
    Principal,
    Review,
    Run,
    ScheduleHistory,
    Step,
    SweepTotal,
)
from parkway.errors import Conflict, Forbidden, Gone, NotFound, Unauthenticated, WrongKind
from parkway.hot import HotStatement


def new_id() -> str:
    return uuid.uuid4().hex


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def interaction_id(step_id: str, key: str, kind: str, resources: Iterable[str] | None) -> str:
    """Deterministic id from (step, key, kind, resource set): a re-park rejoins the same row."""
    material = canonical_json([step_id, key, kind, sorted(set(resources or ()))])
    return hashlib.sha256(material.encode()).hexdigest()[:32]


# What the answer path runs on: the ORM session of a ``transaction`` or the Core connection of a
# ``core_transaction`` (every statement there is Core, so it needs no session).
Executor = Session | Connection


def _is_pg(session: Executor) -> bool:
    bind = session if isinstance(session, Connection) else session.get_bind()
    return bind.dialect.name == "postgresql"


def _literal(value: str) -> Any:
    """A status rendered into the SQL text, so the planner matches the partial index on it (SQLite does
    not for a bound parameter; PostgreSQL's generic plans may not either). Part of the compiled, cached
    statement: a ``literal_execute`` parameter would re-render the SQL string on every execution."""
    text = str(value)
    if not text.replace("_", "").isalnum():  # statuses and kinds only: nothing that needs quoting
        raise ValueError(f"not a status word: {text!r}")
    return literal_column(f"'{text}'", String)


def _one_of(values: Iterable[str]) -> list[Any]:
    """``column.in_(_one_of(...))``: the statuses rendered into the SQL text, not an expanding parameter."""
    return [_literal(v) for v in values]


# The hot path (claim, consume, a step's outcome, events) runs Core statements built once at import, on
# the tables themselves: no ORM unit of work, no per-call statement construction or cache-key work.
_C = cast(Table, Continuation.__table__)
_S = cast(Table, Step.__table__)
_R = cast(Table, Run.__table__)
_P = cast(Table, Principal.__table__)
_G = cast(Table, Grant.__table__)
_I = cast(Table, Interaction.__table__)
_V = cast(Table, Review.__table__)
_H = cast(Table, ScheduleHistory.__table__)


def _bp(name: str, column: Any) -> Any:
    """A named bound parameter typed like ``column`` (JSON and UTC datetimes keep their processing)."""
    return bindparam(name, type_=column.type)


_INSERT_EVENT = insert(cast(Table, Event.__table__))
_INSERT_HISTORY = insert(_H)


# --------------------------------------------------------------------------- events


def event_row(run_id: str, type_: str, **data: Any) -> dict[str, Any]:
    """One event of a run's log (never carrying answer values), for ``append_events``."""
    return {"run_id": run_id, "type": type_, "at": utcnow(), "data": {"run_id": run_id, **data}}


def append_event(session: Session, run_id: str, type_: str, **data: Any) -> None:
    """Append one event to the run's log, inserted now (events take their ``seq`` in statement order)."""
    session.execute(_INSERT_EVENT, event_row(run_id, type_, **data))


def append_events(session: Executor, rows: list[dict[str, Any]]) -> None:
    """Append several events in one round trip, in list order."""
    session.execute(_INSERT_EVENT, rows)


_EVENT_COLUMNS = ("run_id", "type", "at", "data")


def _events_if(*conditions: Any) -> Any:
    """PostgreSQL, inside a statement of data-modifying CTEs: insert event ``k`` (bound as ``e{k}_run_id``,
    ``e{k}_type``, ... from ``_event_params``) only if ``conditions[k]`` holds, in that order."""
    table = cast(Table, Event.__table__)
    rows = [
        select(*(_bp(f"e{k}_{name}", table.c[name]) for name in _EVENT_COLUMNS)).where(condition)
        for k, condition in enumerate(conditions)
    ]
    return insert(table).from_select(list(_EVENT_COLUMNS), union_all(*rows) if len(rows) > 1 else rows[0])


def _event_params(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``event_row`` dicts as the parameters of ``_events_if``."""
    return {f"e{k}_{name}": row[name] for k, row in enumerate(rows) for name in _EVENT_COLUMNS}


# --------------------------------------------------------------------------- principals and grants


def create_principal(session: Session, *, kind: str, name: str, token_hash: str | None) -> Principal | None:
    """Insert a principal; ``None`` when the name is taken."""
    principal = Principal(id=new_id(), kind=PrincipalKind(kind).value, name=name, token_hash=token_hash)
    try:
        with session.begin_nested():
            session.add(principal)
            session.flush()
    except IntegrityError:
        return None
    return principal


_PRINCIPAL_BY_NAME = select(Principal).where(Principal.name == bindparam("name"))


def principal_by_name(session: Session, name: str) -> Principal | None:
    return session.scalar(_PRINCIPAL_BY_NAME, {"name": name})


class Actor(Protocol):
    """Who answers or cancels: an ORM ``Principal`` (the API authenticated it) or a ``PrincipalRef``."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...


@dataclass(frozen=True)
class PrincipalRef:
    id: str
    name: str
    kind: str


_LIVE_NAMED = and_(_P.c.name == bindparam("pname"), _P.c.disabled_at.is_(None))
_PRINCIPAL_REF = select(_P.c.id, _P.c.name, _P.c.kind).where(_LIVE_NAMED)


def principal_ref_by_name(session: Executor, name: str) -> PrincipalRef | None:
    """The live principal's id, name and kind by name, as a plain read (no ORM entity to load and
    track); ``None`` for a name no principal has, or a disabled one's."""
    row = session.execute(_PRINCIPAL_REF, {"pname": name}).first()
    return None if row is None else PrincipalRef(row.id, row.name, row.kind)


def unknown_principal(name: str) -> Forbidden:
    return Forbidden(f"principal {name} does not exist or is disabled")


@dataclass(frozen=True)
class Credential:
    """A caller known so far by the hash of the token it presented, admitted only as one of ``kinds``.
    An answer reads its principal in the statement that reads the interaction (one round trip fewer
    than authenticating first); every other path reads it on its own (``actor``)."""

    token_hash: str
    kinds: tuple[str, ...]

    def admits(self, token_hash: str | None, kind: str) -> bool:
        """A principal read with this token hash (compared in constant time) and of this kind is admitted."""
        return _token_matches(token_hash, self.token_hash) and kind in self.kinds


def _token_matches(stored: str | None, given: str) -> bool:
    return stored is not None and hmac.compare_digest(stored, given)


def _admitted(who: PrincipalRef, credential: Credential) -> PrincipalRef:
    if who.kind not in credential.kinds:
        raise WrongKind(
            f"principal {who.name} is of kind {who.kind}; this needs {' or '.join(credential.kinds)}",
            name=who.name,
            kind=who.kind,
            kinds=credential.kinds,
        )
    return who


def credential_actor(session: Executor, credential: Credential) -> PrincipalRef:
    """The principal holding the credential's token (one plain read); ``Unauthenticated`` when none does,
    ``WrongKind`` when it is not of an admitted kind."""
    found = principal_by_token(session, credential.token_hash)  # the API's one token lookup
    if found is None:
        raise Unauthenticated("the bearer token is not valid")
    return _admitted(PrincipalRef(found.id, found.name, found.kind), credential)


def actor(session: Executor, principal: Actor | Credential | str) -> Actor:
    """The principal as given, by name or by credential (one plain read); ``Forbidden`` for a name no
    principal has, and as ``credential_actor`` for a credential."""
    if isinstance(principal, Credential):
        return credential_actor(session, principal)
    if not isinstance(principal, str):
        return principal
    found = principal_ref_by_name(session, principal)
    if found is None:
        raise unknown_principal(principal)
    return found


def create_grant(session: Session, *, principal_id: str, target: str) -> Grant:
    """Give a principal access to a target (a new grant row each time; revoking one revokes it only)."""
    grant = Grant(id=new_id(), principal_id=principal_id, target=target, created_at=utcnow())
    session.add(grant)
    session.flush()
    return grant


def revoke_grant(session: Session, grant_id: str) -> Grant | None:
    """live -> revoked; ``None`` when the grant is unknown or already revoked."""
    return session.scalar(
        update(Grant)
        .where(Grant.id == grant_id, Grant.revoked_at.is_(None))
        .values(revoked_at=utcnow())
        .returning(Grant)
    )


def is_granted(session: Session, principal: Principal, target: str) -> bool:
    """Whether the principal holds a live grant on the target, read now (admins hold every target)."""
    if principal.kind == PrincipalKind.ADMIN:
        return True
    found = session.scalar(
        select(Grant.id).where(Grant.principal_id == principal.id, Grant.target == target, Grant.revoked_at.is_(None))
    )
    return found is not None


# --------------------------------------------------------------------------- runs


def create_run(
    session: Session,
    *,
    workflow: str,
    payload: Any,
    owner: Principal,
    target: str,
    idempotency_key: str | None,
    request_digest: str,
) -> tuple[Run, Due | None]:
    """Insert a run, its first step and that step's ready continuation.

    With an idempotency key already used by this owner: the same body returns the existing run and
    ``None`` for the continuation; a different body raises ``Conflict``.
    """
    if idempotency_key is not None:
        existing = _run_by_key(session, owner.id, idempotency_key)
        if existing is not None:
            return _same_request(existing, request_digest), None
    now = utcnow()
    run = Run(
        id=new_id(),
        workflow=workflow,
        status=RunStatus.RUNNING,
        owner_id=owner.id,
        target=target,
        payload=payload,
        idempotency_key=idempotency_key,
        request_digest=request_digest,
        created_at=now,
        updated_at=now,
    )
    try:
        with session.begin_nested():
            session.add(run)
            session.flush()
    except IntegrityError:
        # A concurrent request with the same key won the insert: answer as its retry.
        existing = _run_by_key(session, owner.id, idempotency_key or "")
        if existing is None:
            raise
        return _same_request(existing, request_digest), None
    append_event(session, run.id, "run.created", workflow=workflow, owner=owner.name, target=target)
    step = _insert_step(session, run.id, seq=1, name=workflow, payload=payload)
    continuation = _insert_continuation(session, run.id, step.id, ContinuationKind.START, workflow)
    return run, continuation


def _run_by_key(session: Session, owner_id: str, key: str) -> Run | None:
    return session.scalar(select(Run).where(Run.owner_id == owner_id, Run.idempotency_key == key))


def _same_request(run: Run, request_digest: str) -> Run:
    if run.request_digest != request_digest:
        raise Conflict(
            f"idempotency key {run.idempotency_key!r} was used for run {run.id} with a different request",
            {"run_id": run.id, "status": run.status},
        )
    return run


def _insert_step(session: Session, run_id: str, *, seq: int, name: str, payload: Any) -> Step:
    now = utcnow()
    step = Step(
        id=new_id(),
        run_id=run_id,
        seq=seq,
        name=name,
        status=StepStatus.RUNNING,
        payload=payload,
        created_at=now,
        updated_at=now,
    )
    session.add(step)
    session.flush()
    return step


@dataclass(frozen=True)
class Due:
    """A continuation made ready in this transaction: publish it once the transaction has committed."""

    id: str
    kind: str
    run_id: str
    step_id: str
    name: str


_INSERT_CONTINUATION = insert(_C).values(enqueued_at=db_now(), created_at=db_now())


def _insert_continuation(
    session: Executor,
    run_id: str,
    step_id: str,
    kind: ContinuationKind,
    name: str,
    *,
    events: list[dict[str, Any]] | None = None,
) -> Due:
    """Insert a ready continuation and its event (after ``events``, the caller's, in the same insert)."""
    due = Due(id=new_id(), kind=kind.value, run_id=run_id, step_id=step_id, name=name)
    session.execute(
        _INSERT_CONTINUATION,
        {
            "id": due.id,
            "run_id": run_id,
            "step_id": step_id,
            "kind": due.kind,
            "name": name,
            "status": ContinuationStatus.READY.value,
            "attempts": 0,
            # Published right after this commit; if that publish is lost the sweep sends it again later.
            "publishes": 1,
        },
    )
    ready = event_row(run_id, "continuation.ready", continuation_id=due.id, step_id=step_id, name=name)
    append_events(session, [*(events or []), ready])
    return due


def _set_run_status(session: Session, run_id: str, from_: Iterable[str], to: RunStatus) -> Run | None:
    """from -> to between live statuses; ``None`` when it is not in a ``from`` status any more (a run ends
    only through ``_end_run``)."""
    assert to not in RUN_TERMINAL, f"a run ends through _end_run, not _set_run_status ({to})"
    return session.scalar(
        update(Run)
        .where(Run.id == run_id, Run.status.in_([str(s) for s in from_]))
        .values(status=to.value, updated_at=utcnow())
        .returning(Run)
        .execution_options(synchronize_session=False)
    )


def _record_terminal_history(session: Session, run: RunRecord) -> None:
    """The schedule-history row commits with the canonical terminal record it projects (the CAS that
    made the run terminal ran once, so no row exists yet); only ``run_metadata.json`` is written after."""
    session.execute(
        _INSERT_HISTORY,
        {
            "run_id": run.id,
            "workflow": run.workflow,
            "status": run.status,
            "completed_at": run.completed_at,
            "execution_id": run.finished_by,
            "recorded_at": utcnow(),
        },
    )


def _set_step_status(
    session: Session, step_id: str, from_: Iterable[str], to: StepStatus, **values: Any
) -> Step | None:
    """from -> to for a step; ``None`` when it is not in a ``from`` status any more."""
    return session.scalar(
        update(Step)
        .where(Step.id == step_id, Step.status.in_([str(s) for s in from_]))
        .values(status=to.value, updated_at=utcnow(), **values)
        .returning(Step)
        .execution_options(synchronize_session=False)
    )


# --------------------------------------------------------------------------- claim and consume


class StepLike(Protocol):
    """What the outcome transitions need of a step: an ORM ``Step`` or the claim's ``StepRef``."""

    @property
    def id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class StepRef:
    id: str
    run_id: str
    name: str
    payload: Any
    snapshot: Any


@dataclass(frozen=True)
class Claim:
    """A continuation this execution holds, with what its body needs to run (read at claim)."""

    continuation: Row[Any] | Claimed  # id, run_id, step_id, kind, name, attempts
    step: StepRef
    run_id: str
    run_status: str
    owner_name: str
    granted: bool  # the owner holds a live grant on the run's target now (admins hold every target)
    review_running: bool  # a review of the step was running when it was claimed (an earlier execution's)
    answers: dict[str, Answer]  # the step's interactions by key (sealed values still sealed)


@dataclass(frozen=True)
class RunRecord:
    """A run's canonical terminal record, as the terminal CAS returned it (what projections are made of)."""

    id: str
    workflow: str
    status: str
    completed_at: datetime | None
    finished_by: str | None
    warnings: Any
    error_details: Any = None  # a failed run's Fail details (its result is null)


def _claimable() -> Any:
    """ready, or claimed under a lease that expired by the database's clock: the one definition the claim
    and ``give_up_exhausted`` share."""
    return or_(
        _C.c.status == _literal(ContinuationStatus.READY),
        and_(_C.c.status == _literal(ContinuationStatus.CLAIMED), _C.c.lease_expires_at < db_now()),
    )


_CLAIM = (
    update(_C)
    .where(
        _C.c.id == bindparam("cid"),
        _claimable(),
        _C.c.attempts < bindparam("max_attempts"),
    )
    .values(
        status=ContinuationStatus.CLAIMED.value,
        attempts=_C.c.attempts + 1,
        claimed_by=bindparam("eid"),
        lease_expires_at=db_now("lease_s"),
    )
    .returning(_C.c.id, _C.c.run_id, _C.c.step_id, _C.c.kind, _C.c.name, _C.c.attempts)
)

_ANSWERER = _P.alias("answerer")
_CLAIMED_COLUMNS = ("id", "run_id", "step_id", "kind", "name", "attempts")


def _claim_context(claimed: Any = None) -> Any:
    """Everything the body needs and the refusal checks read, as one joined query: the step, its run's
    status, the owner's grant, whether a review of the step is running, and the step's interactions (a
    row each; none for a step that never parked) with who answered them. ``claimed`` (the claim's
    ``RETURNING`` as a CTE, PostgreSQL) makes it the claim and this read in one statement; without it the
    read is of the step ``:sid``."""
    columns = [
        _S.c.id,
        _S.c.run_id,
        _S.c.name,
        _S.c.payload,
        _S.c.snapshot,
        _R.c.status.label("run_status"),
        _P.c.name.label("owner_name"),
        or_(
            _P.c.kind == _literal(PrincipalKind.ADMIN),
            exists().where(_G.c.principal_id == _P.c.id, _G.c.target == _R.c.target, _G.c.revoked_at.is_(None)),
        ).label("granted"),
        exists().where(_V.c.step_id == _S.c.id, _V.c.status == _literal(ReviewStatus.RUNNING)).label("review_running"),
        _I.c.key.label("i_key"),
        _I.c.kind.label("i_kind"),
        _I.c.status.label("i_status"),
        _I.c.value.label("i_value"),
        _I.c.secret.label("i_secret"),
        _ANSWERER.c.name.label("i_answered_by"),
    ]
    joined = (
        _S.join(_R, _R.c.id == _S.c.run_id)
        .join(_P, _P.c.id == _R.c.owner_id)
        .outerjoin(_I, _I.c.step_id == _S.c.id)
        .outerjoin(_ANSWERER, _ANSWERER.c.id == _I.c.answered_by_id)
    )
    if claimed is None:
        return select(*columns).select_from(joined).where(_S.c.id == bindparam("sid"))
    columns += [claimed.c[name].label(f"c_{name}") for name in _CLAIMED_COLUMNS]
    return select(*columns).select_from(claimed.join(joined, _S.c.id == claimed.c.step_id))


_CLAIM_CONTEXT = _claim_context()
# PostgreSQL: the claim's compare-and-set and the joined read in one statement (one round trip, and no
# transaction to open and commit around them).
_CLAIM_WITH_CONTEXT = HotStatement(_claim_context(_CLAIM.cte("claimed")))


@dataclass(frozen=True)
class Claimed:
    """The continuation row as the claim left it."""

    id: str
    run_id: str
    step_id: str
    kind: str
    name: str
    attempts: int


def claim_in_one_statement(
    conn: Connection, continuation_id: str, *, execution_id: str, lease_s: float, max_attempts: int
) -> Claim | None:
    """``claim`` and ``load_claim`` as one statement, for a connection in autocommit (PostgreSQL only).

    ``None`` when nothing was claimed (see ``claim``); the caller then looks at the row in a transaction.
    """
    params = {"cid": continuation_id, "max_attempts": max_attempts, "eid": execution_id, "lease_s": lease_s}
    rows = _CLAIM_WITH_CONTEXT.rows(conn, params)
    if not rows:
        return None
    first = rows[0]
    claimed = Claimed(*(getattr(first, f"c_{name}") for name in _CLAIMED_COLUMNS))
    return _claim_from_rows(claimed, rows)


def claim(
    session: Session, continuation_id: str, *, execution_id: str, lease_s: float, max_attempts: int
) -> Row[Any] | None:
    """ready -> claimed (or an expired claim -> claimed), attempts + 1, with a lease.

    Returns the claimed row (id, run_id, step_id, kind, name, attempts). ``None`` when the row is
    consumed, dead, unknown, held under a live lease by someone else, or out of attempts (see
    ``give_up_exhausted``): the caller's delivery does nothing. The lease ends ``lease_s`` after the
    database's clock.
    """
    return session.execute(
        _CLAIM, {"cid": continuation_id, "max_attempts": max_attempts, "eid": execution_id, "lease_s": lease_s}
    ).first()


def give_up_exhausted(session: Session, continuation_id: str, *, max_attempts: int) -> Continuation | None:
    """A claimable continuation already executed ``max_attempts`` times -> dead, its run interrupted.

    ``None`` when it is not claimable or still has attempts left.
    """
    row = session.scalar(
        select(Continuation).where(
            Continuation.id == continuation_id,
            _claimable(),
            Continuation.attempts >= max_attempts,
        )
    )
    if row is None:
        return None
    reason = f"continuation {row.name} for step {row.step_id} gave up after {row.attempts} attempts"
    return give_up(session, row.id, reason=reason)


def load_claim(session: Session, continuation: Row[Any] | Claimed) -> Claim:
    """Everything the body needs and the refusal checks read, in one joined read after the claim (see
    ``_claim_context``)."""
    return _claim_from_rows(continuation, session.execute(_CLAIM_CONTEXT, {"sid": continuation.step_id}).all())


def _claim_from_rows(continuation: Row[Any] | Claimed, rows: Sequence[Row[Any]]) -> Claim:
    row = rows[0]
    answered = (InteractionStatus.ANSWERED, InteractionStatus.REJECTED)
    answers = {
        i.i_key: Answer(
            key=i.i_key,
            kind=i.i_kind,
            status=i.i_status,
            value=i.i_value if i.i_status in answered else None,
            answered_by=i.i_answered_by,
            sealed=i.i_secret if i.i_status == InteractionStatus.ANSWERED else None,
        )
        for i in rows
        if i.i_key is not None
    }
    return Claim(
        continuation=continuation,
        step=StepRef(id=row.id, run_id=row.run_id, name=row.name, payload=row.payload, snapshot=row.snapshot),
        run_id=row.run_id,
        run_status=row.run_status,
        owner_name=row.owner_name,
        granted=bool(row.granted),
        review_running=bool(row.review_running),
        answers=answers,
    )


def renew_lease(session: Session, continuation_id: str, *, execution_id: str, lease_s: float) -> bool:
    """claimed -> claimed with a lease ending ``lease_s`` after the database's clock, only for the
    execution that holds it."""
    row = session.scalar(
        update(Continuation)
        .where(
            Continuation.id == continuation_id,
            Continuation.status == ContinuationStatus.CLAIMED,
            Continuation.claimed_by == execution_id,
        )
        .values(lease_expires_at=db_now(lease_s))
        .returning(Continuation.id)
    )
    return row is not None


_CONSUME = (
    update(_C)
    .where(
        _C.c.id == bindparam("cid"),
        _C.c.status == _literal(ContinuationStatus.CLAIMED),
        _C.c.claimed_by == bindparam("eid"),
    )
    .values(status=ContinuationStatus.CONSUMED.value, consumed_at=_bp("at", _C.c.consumed_at), lease_expires_at=None)
)


_CONSUME_RETURNING = _CONSUME.returning(
    _C.c.kind,
    _C.c.run_id,
    _C.c.step_id,
    select(_S.c.name).where(_S.c.id == _C.c.step_id).scalar_subquery().label("name"),
)


def consume(session: Session, continuation_id: str, *, execution_id: str) -> str | None:
    """claimed -> consumed, only by the execution holding the claim; its id, or ``None`` when it lost it.

    A parked step's continuation writes ``step.resumed`` here, first in the transaction that commits it."""
    row = session.execute(_CONSUME_RETURNING, {"cid": continuation_id, "eid": execution_id, "at": utcnow()}).first()
    if row is None:
        return None
    if row.kind == ContinuationKind.RESUME:
        session.execute(_INSERT_EVENT, _resumed_event(row.run_id, row.step_id, row.name, continuation_id))
    return continuation_id


def _resumed_event(run_id: str, step_id: str, name: str, continuation_id: str) -> dict[str, Any]:
    return event_row(run_id, "step.resumed", step_id=step_id, name=name, continuation_id=continuation_id)


@dataclass
class Answer:
    """What a continuation sees of one interaction."""

    key: str
    kind: str
    status: str
    value: Any
    answered_by: str | None
    sealed: str | None = field(default=None, repr=False)

    @property
    def approved(self) -> bool:
        return (
            self.kind == InteractionKind.PERMISSION
            and self.status == InteractionStatus.ANSWERED
            and isinstance(self.value, dict)
            and self.value.get("approved") is True
        )


_ERASE_STEP_SECRETS = update(_I).where(_I.c.step_id == bindparam("sid"), _I.c.secret.is_not(None)).values(secret=None)
_ERASE_RUN_SECRETS = update(_I).where(_I.c.run_id == bindparam("rid"), _I.c.secret.is_not(None)).values(secret=None)


def erase_secrets(session: Session, *, step_id: str | None = None, run_id: str | None = None) -> int:
    """Sealed sensitive values -> NULL (ciphertext too), for a consumed step or an ended run."""
    if step_id is not None:
        result = session.execute(_ERASE_STEP_SECRETS, {"sid": step_id})
    else:
        result = session.execute(_ERASE_RUN_SECRETS, {"rid": run_id})
    return int(getattr(result, "rowcount", 0) or 0)


# --------------------------------------------------------------------------- outcomes (inside consume)


@dataclass
class InteractionSpec:
    """A validated interaction to create when a step parks."""

    key: str
    kind: str
    target: str
    prompt: str | None = None
    schema: Any = None
    action: str | None = None
    resources: list[str] | None = None
    sensitive: list[str] = field(default_factory=list)
    expires_in: float | None = None
    id: str | None = None  # a deterministic id chosen by the caller (tool permission requests)

    def interaction_id(self, step_id: str) -> str:
        return self.id or interaction_id(step_id, self.key, self.kind, self.resources)


_STEP_ENDED = [StepStatus.RUNNING.value, StepStatus.RESUMING.value, StepStatus.PARKED.value]
_FINISH_STEP = (
    update(_S)
    .where(_S.c.id == bindparam("sid"), _S.c.status.in_(_one_of(_STEP_ENDED)))
    .values(
        status=bindparam("step_to"),  # "to" is the run's status where both share a statement
        result=_bp("res", _S.c.result),
        error=bindparam("err"),
        reason=bindparam("why"),
        updated_at=_bp("at", _S.c.updated_at),
    )
)
# As RunRecord's fields, in order.
_RUN_RECORD_COLUMNS = ("id", "workflow", "status", "completed_at", "finished_by", "warnings", "error_details")
_FINISH_RUN = (
    update(_R)
    .where(_R.c.id == bindparam("rid"), _R.c.status.in_(_one_of(s.value for s in RUN_LIVE)))
    .values(
        status=bindparam("to"),
        result=_bp("res", _R.c.result),
        error=bindparam("err"),
        error_details=_bp("det", _R.c.error_details),
        reason=bindparam("why"),
        finished_by=bindparam("eid"),
        updated_at=_bp("at", _R.c.updated_at),
        completed_at=_bp("at", _R.c.completed_at),
        projection_pending=True,
    )
    .returning(*(_R.c[name] for name in _RUN_RECORD_COLUMNS))
)


def _end_run(
    session: Session,
    run_id: str,
    status: RunStatus,
    *,
    execution_id: str,
    result: Any = None,
    error: str | None = None,
    reason: str | None = None,
    error_details: Any = None,
) -> RunRecord | None:
    """live -> terminal for a run (the one compare-and-set that writes a canonical terminal record),
    with its schedule-history row; ``None`` when the run already ended (a proven outcome is kept)."""
    values = {"res": result, "err": error, "det": error_details, "why": reason, "at": utcnow()}
    row = session.execute(_FINISH_RUN, {"rid": run_id, "to": status.value, "eid": execution_id, **values}).first()
    if row is None:
        return None
    run = RunRecord(*row)
    _record_terminal_history(session, run)
    return run


def finish_run(
    session: Session,
    step: StepLike,
    *,
    status: RunStatus,
    execution_id: str,
    result: Any = None,
    error: str | None = None,
    reason: str | None = None,
    error_details: Any = None,
) -> RunRecord | None:
    """The step ends and its run takes its canonical terminal status (written once, by CAS), with its
    schedule-history row; returns that record, or ``None`` when the run was already terminal."""
    values = {"res": result, "err": error, "why": reason, "at": utcnow()}
    session.execute(_FINISH_STEP, {"sid": step.id, "step_to": _STEP_OF_RUN[status].value, **values})
    run = _end_run(session, step.run_id, status, execution_id=execution_id, result=result, error=error,
                   reason=reason, error_details=error_details)  # fmt: skip
    erase_secrets(session, run_id=step.run_id)
    ended = run is not None
    append_events(session, _finish_events(step, status, execution_id, ended, error=error, reason=reason,
                                          error_details=error_details))  # fmt: skip
    return run


_STEP_OF_RUN = {
    RunStatus.COMPLETED: StepStatus.COMPLETED,
    RunStatus.FAILED: StepStatus.FAILED,
    RunStatus.INTERRUPTED: StepStatus.INTERRUPTED,
    RunStatus.CANCELED: StepStatus.CANCELED,
}


def _finish_events(
    step: StepLike,
    status: RunStatus,
    execution_id: str,
    ended: bool,
    *,
    error: str | None,
    reason: str | None,
    error_details: Any = None,
) -> list[dict[str, Any]]:
    """The step's end and, when this ended the run, the run's: in that order."""
    step_status = _STEP_OF_RUN[status].value
    events = [event_row(step.run_id, f"step.{step_status}", step_id=step.id, name=step.name)]
    if ended:
        data: dict[str, Any] = {"status": status.value, "execution_id": execution_id}
        if error is not None:
            data["error"] = error
        if error_details is not None:
            data["error_details"] = error_details
        if reason is not None:
            data["reason"] = reason
        events.append(event_row(step.run_id, f"run.{status.value}", **data))
    return events


def _consume_and_finish_run() -> Any:
    """PostgreSQL: ``consume`` (and ``step.resumed`` for a parked step's continuation) and, only if it
    won, ``finish_run``'s writes (the step's CAS, the run's terminal CAS with its schedule-history row,
    the run's sealed values erased) as one statement of data-modifying CTEs. One row (``consumed``, then
    the terminal record's columns, NULL when the run had already ended) when the consume won; none when
    the claim was lost."""
    consumed = _CONSUME.returning(_C.c.id, _C.c.kind).cte("consumed")
    won = exists(select(consumed.c.id))
    resumed = exists(select(consumed.c.id).where(consumed.c.kind == _literal(ContinuationKind.RESUME)))
    step = _FINISH_STEP.where(won).cte("step_ended")
    run = _FINISH_RUN.where(won).cte("run_ended")
    history = (
        insert(_H)
        .from_select(
            ["run_id", "workflow", "status", "completed_at", "execution_id", "recorded_at"],
            select(
                run.c.id,
                run.c.workflow,
                run.c.status,
                run.c.completed_at,
                run.c.finished_by,
                _bp("at", _H.c.recorded_at),
            ),
        )
        .cte("history")
    )
    erased = (update(_I).where(_I.c.run_id == bindparam("rid"), _I.c.secret.is_not(None), won).values(secret=None)).cte(
        "erased"
    )
    # A parked step's resumption, the step's end, then the run's
    events = _events_if(resumed, won, exists(select(run.c.id))).cte("events")
    return (
        select(consumed.c.id.label("consumed"), *(run.c[name] for name in _RUN_RECORD_COLUMNS))
        .select_from(consumed.outerjoin(run, true()))
        .add_cte(step, history, erased, events)
    )


_CONSUME_AND_FINISH_RUN = HotStatement(_consume_and_finish_run())


def consume_and_finish_run(
    session: Session | Connection,
    continuation_id: str,
    step: StepLike,
    *,
    status: RunStatus,
    execution_id: str,
    result: Any = None,
    error: str | None = None,
    error_details: Any = None,
) -> tuple[bool, RunRecord | None]:
    """``consume`` then ``finish_run`` in one statement (PostgreSQL), its events included: whether the
    consume won, and the run's terminal record (``None`` when the claim was lost or the run had already
    ended). A whole unit of work: run it in autocommit (``parkway.db.single_statement``)."""
    now = utcnow()
    params = {
        **{"cid": continuation_id, "eid": execution_id, "at": now, "sid": step.id, "rid": step.run_id},
        **{"step_to": _STEP_OF_RUN[status].value, "to": status.value, "res": result, "err": error, "why": None},
        "det": error_details,
    }
    events = [
        _resumed_event(step.run_id, step.id, step.name, continuation_id),
        *_finish_events(step, status, execution_id, True, error=error, reason=None, error_details=error_details),
    ]
    row = _CONSUME_AND_FINISH_RUN.first(session, {**params, **_event_params(events)})
    if row is None:
        return False, None
    return True, (RunRecord(*row[1:]) if row.id is not None else None)


def next_step(session: Session, step: StepLike, *, name: str, payload: Any) -> Due:
    """The step completes and hands over to a new step with its own ready continuation."""
    _set_step_status(
        session,
        step.id,
        [StepStatus.RUNNING, StepStatus.RESUMING],
        StepStatus.COMPLETED,
        result={"next": name},
    )
    append_event(session, step.run_id, "step.completed", step_id=step.id, name=step.name, next=name)
    new = _insert_step(session, step.run_id, seq=_next_seq(session, step.run_id), name=name, payload=payload)
    return _insert_continuation(session, step.run_id, new.id, ContinuationKind.START, name)


def _next_seq(session: Session, run_id: str) -> int:
    current = session.scalar(select(Step.seq).where(Step.run_id == run_id).order_by(Step.seq.desc()).limit(1))
    return (current or 0) + 1


def park(
    session: Session,
    step: StepLike,
    *,
    continuation: str,
    snapshot: Any,
    interactions: Sequence[InteractionSpec],
    from_continuation: bool,
) -> Step:
    """The step parks with all its interactions at once, and the run waits.

    A continuation that parks again does so as a new step (every wait has its own step and at most one
    continuation).
    """
    if from_continuation:
        _set_step_status(session, step.id, [StepStatus.RESUMING], StepStatus.COMPLETED, result={"parked": continuation})
        append_event(session, step.run_id, "step.completed", step_id=step.id, name=step.name)
        step = _insert_step(
            session,
            step.run_id,
            seq=_next_seq(session, step.run_id),
            name=continuation.split("@", 1)[0],
            payload=None,
        )
    parked = _set_step_status(
        session,
        step.id,
        [StepStatus.RUNNING],
        StepStatus.PARKED,
        snapshot=snapshot,
        continuation=continuation,
    )
    if parked is None:  # pragma: no cover - the consume CAS already proved this execution owns the step
        raise RuntimeError(f"step {step.id} is not running; cannot park")
    for spec in interactions:
        row = Interaction(
            id=spec.interaction_id(step.id),
            run_id=step.run_id,
            step_id=step.id,
            key=spec.key,
            kind=spec.kind,
            prompt=spec.prompt,
            schema=spec.schema,
            action=spec.action,
            resources=spec.resources,
            sensitive=list(spec.sensitive),
            target=spec.target,
            status=InteractionStatus.PENDING,
            expires_at=db_now(spec.expires_in) if spec.expires_in else None,  # the database's clock
            created_at=db_now(),
        )
        session.add(row)
    session.flush()
    append_event(session, step.run_id, "step.parked", step_id=step.id, continuation=continuation)
    for spec in interactions:
        iid = spec.interaction_id(step.id)
        append_event(
            session,
            step.run_id,
            "interaction.asked",
            interaction_id=iid,
            step_id=step.id,
            key=spec.key,
            kind=spec.kind,
            target=spec.target,
        )
    _set_run_status(session, step.run_id, [RunStatus.RUNNING], RunStatus.WAITING)
    return parked


# --------------------------------------------------------------------------- giving up (dead letter)


def give_up(
    session: Session, continuation_id: str, *, reason: str, execution_id: str | None = None
) -> Continuation | None:
    """ready|claimed -> dead, and its run, step and pending interactions -> interrupted with the reason.

    ``None`` when the continuation is already consumed or dead (nothing to give up).
    """
    dead = session.scalar(
        update(Continuation)
        .where(
            Continuation.id == continuation_id,
            Continuation.status.in_([ContinuationStatus.READY, ContinuationStatus.CLAIMED]),
        )
        .values(status=ContinuationStatus.DEAD, reason=reason, lease_expires_at=None)
        .returning(Continuation)
        .execution_options(synchronize_session=False)
    )
    if dead is None:
        return None
    append_event(session, dead.run_id, "continuation.dead", continuation_id=dead.id, reason=reason)
    interrupt_run(session, dead.run_id, reason=reason, execution_id=execution_id or f"give-up:{dead.id}")
    return dead


def interrupt_run(session: Session, run_id: str, *, reason: str, execution_id: str) -> RunRecord | None:
    """A live run -> interrupted; its live steps and pending interactions -> interrupted, each with an event.

    ``None`` when the run is already terminal (a proven outcome is never overwritten).
    """
    run = _end_run(session, run_id, RunStatus.INTERRUPTED, execution_id=execution_id, reason=reason)
    if run is None:
        return None
    erase_secrets(session, run_id=run_id)
    pending = session.scalars(
        update(Interaction)
        .where(Interaction.run_id == run_id, Interaction.status == InteractionStatus.PENDING)
        .values(status=InteractionStatus.INTERRUPTED, closed_at=utcnow(), reason=reason)
        .returning(Interaction)
        .execution_options(synchronize_session=False)
    ).all()
    for i in pending:
        append_event(session, run_id, "interaction.interrupted", interaction_id=i.id, key=i.key, reason=reason)
    steps = session.scalars(
        update(Step)
        .where(
            Step.run_id == run_id,
            Step.status.in_([StepStatus.RUNNING, StepStatus.PARKED, StepStatus.RESUMING]),
        )
        .values(status=StepStatus.INTERRUPTED, reason=reason, updated_at=utcnow())
        .returning(Step)
        .execution_options(synchronize_session=False)
    ).all()
    for s in steps:
        append_event(session, run_id, "step.interrupted", step_id=s.id, name=s.name, reason=reason)
    # Any continuation of the run still waiting to be driven cannot be any more.
    session.execute(
        update(Continuation)
        .where(
            # Through the run's steps (uq_steps_run_id_seq, then uq_continuations_step_id_kind): no index of
            # continuations by run is kept up on every insert and status change for this rare path.
            Continuation.step_id.in_(select(Step.id).where(Step.run_id == run_id)),
            Continuation.status.in_([ContinuationStatus.READY, ContinuationStatus.CLAIMED]),
        )
        .values(status=ContinuationStatus.DEAD, reason=reason, lease_expires_at=None)
        .execution_options(synchronize_session=False)
    )
    append_event(session, run_id, "run.interrupted", status="interrupted", reason=reason)
    return run


# --------------------------------------------------------------------------- answer and cancel


def interaction_state(session: Executor, interaction: Interaction | Row[Any]) -> dict[str, Any]:
    """The authoritative state of an interaction as errors carry it (no values: they may be sensitive)."""
    run_status = session.scalar(select(Run.status).where(Run.id == interaction.run_id))
    answered_by = None
    if interaction.answered_by_id:
        answered_by = session.scalar(select(Principal.name).where(Principal.id == interaction.answered_by_id))
    return {
        "id": interaction.id,
        "run_id": interaction.run_id,
        "step_id": interaction.step_id,
        "key": interaction.key,
        "kind": interaction.kind,
        "status": interaction.status,
        "run_status": run_status,
        "answered_by": answered_by,
        "answered_at": interaction.answered_at.isoformat() if interaction.answered_at else None,
        "expires_at": interaction.expires_at.isoformat() if interaction.expires_at else None,
    }


_LOCK_STEP_OF = (
    select(_S.c.id)
    .where(_S.c.id == select(_I.c.step_id).where(_I.c.id == bindparam("iid")).scalar_subquery())
    .with_for_update()
)


# What an answer reads of its interaction (not its prompt, resources, value or closing: fewer columns to
# describe and convert on every answer).
_ANSWER_READS = tuple(
    _I.c[name]
    for name in ("id", "run_id", "step_id", "key", "kind", "schema", "sensitive", "target", "status", "expires_at",
                 "response_id", "response_digest", "answered_by_id", "answered_at")
)  # fmt: skip


def _interaction_read(principal_id: Any, columns: Sequence[Any] = (_I,)) -> Any:
    """The interaction ``:iid`` (``columns`` of it), its run's status and whether ``principal_id`` holds a
    live grant on its target: one read."""
    return (
        select(
            *columns,
            _R.c.status.label("run_status"),
            exists()
            .where(_G.c.principal_id == principal_id, _G.c.target == _I.c.target, _G.c.revoked_at.is_(None))
            .label("granted"),
        )
        .join(_R, _R.c.id == _I.c.run_id)
        .where(_I.c.id == bindparam("iid"))
    )


# Cancels (and the reads again after a lost CAS) also read whether the principal owns the run and holds a
# live grant on the run's target: an agent may cancel only the interactions of its own runs.
_INTERACTION = _interaction_read(bindparam("pid")).add_columns(
    _R.c.owner_id.label("run_owner_id"),
    exists()
    .where(_G.c.principal_id == bindparam("pid"), _G.c.target == _R.c.target, _G.c.revoked_at.is_(None))
    .label("owner_granted"),
)


def _interaction_locked(read: Any) -> Any:
    """PostgreSQL, for an answer: ``read``, and the step's lock taken by it. Its rows come from the
    statement's snapshot, taken before any wait for that lock: when the answer's CAS then loses, the
    interaction is read again (``_INTERACTION``), the lock held by then. The step's continuation name is
    read too, for the event of the continuation this answer may make due."""
    return (
        read.add_columns(_S.c.continuation.label("step_continuation"))
        .join(_S, _S.c.id == _I.c.step_id)
        .with_for_update(of=_S)
    )


_INTERACTION_LOCKED = HotStatement(_interaction_locked(_interaction_read(bindparam("pid"), _ANSWER_READS)))


def _interaction_locked_by(principal: Any) -> Any:
    """``_INTERACTION_LOCKED`` for a principal found by ``principal`` (a condition on ``principals``): its
    id, name, kind and token hash read in the same statement (NULL when no principal matches), its grant
    looked up by that id."""
    return _interaction_locked(
        _interaction_read(_P.c.id, _ANSWER_READS)
        .add_columns(
            _P.c.id.label("actor_id"),
            _P.c.name.label("actor_name"),
            _P.c.kind.label("actor_kind"),
            _P.c.token_hash.label("actor_token"),
        )
        .outerjoin(_P, principal)
    )


_INTERACTION_LOCKED_BY_NAME = HotStatement(_interaction_locked_by(_LIVE_NAMED))
_INTERACTION_LOCKED_BY_TOKEN = HotStatement(_interaction_locked_by(_P.c.token_hash == bindparam("ptok")))


def _read_interaction(
    session: Executor, statement: Any, interaction_id_: str, principal: Actor, act: Act
) -> tuple[Row[Any], str]:
    """``statement`` (``_INTERACTION`` or ``_INTERACTION_LOCKED``) for this interaction and principal;
    ``NotFound`` for an unknown id, then as ``authorize`` for ``act``."""
    params = {"iid": interaction_id_, "pid": principal.id}
    if isinstance(statement, HotStatement):
        interaction = statement.first(session, params)
    else:
        interaction = session.execute(statement, params).first()
    if interaction is None:
        raise NotFound(f"interaction {interaction_id_} does not exist")
    authorize(interaction, principal, act)
    return interaction, interaction.run_status


Act = Literal["answer", "cancel"]
ANSWERERS = (PrincipalKind.HUMAN.value, PrincipalKind.ADMIN.value)


def authorize(interaction: Row[Any], principal: Actor, act: Act) -> None:
    """Who may answer or cancel an interaction (SPEC §4), the one rule for every path (HTTP, the page,
    the SDK): a human or an admin with a live grant on the interaction's target (admins read everything,
    but answer and cancel only where granted); agents never answer (``WrongKind``) and cancel only the
    interactions of runs they own while holding a live grant on the run's target. ``Forbidden``
    otherwise. A disabled principal holds no live grant (disabling revokes them), so it may do neither.
    ``interaction`` is a row of ``_INTERACTION`` (``granted``; for a cancel ``run_owner_id`` and
    ``owner_granted`` too)."""
    if principal.kind not in ANSWERERS:
        if act == "answer":
            raise WrongKind(
                f"principal {principal.name} is of kind {principal.kind}; this needs {' or '.join(ANSWERERS)}",
                name=principal.name,
                kind=principal.kind,
                kinds=ANSWERERS,
            )
        if interaction.run_owner_id != principal.id or not interaction.owner_granted:
            raise Forbidden(
                f"agent {principal.name} may cancel only the interactions of its own runs, while granted on "
                "their target"
            )
        return
    if not interaction.granted:
        raise Forbidden(f"principal {principal.name} holds no grant on target {interaction.target}")


def _read_interaction_locked(
    session: Executor, interaction_id_: str, principal: Actor | Credential | str
) -> tuple[Row[Any], str, Actor]:
    """PostgreSQL: ``_INTERACTION_LOCKED`` for this interaction, the principal read in the same statement
    when given by name or credential. Raises as ``_read_interaction``, and as ``actor`` for the principal
    (which is told first: who asks comes before what they may learn)."""
    if isinstance(principal, str):
        row = _INTERACTION_LOCKED_BY_NAME.first(session, {"iid": interaction_id_, "pname": principal})
        known = row is not None and row.actor_id is not None
    elif isinstance(principal, Credential):
        row = _INTERACTION_LOCKED_BY_TOKEN.first(session, {"iid": interaction_id_, "ptok": principal.token_hash})
        known = row is not None and principal.admits(row.actor_token, row.actor_kind)
    else:
        return (*_read_interaction(session, _INTERACTION_LOCKED, interaction_id_, principal, "answer"), principal)
    if row is None or not known:
        actor(session, principal)  # raises for an unknown (or, by credential, inadmissible) principal
        raise NotFound(f"interaction {interaction_id_} does not exist")
    who = PrincipalRef(row.actor_id, row.actor_name, row.actor_kind)
    authorize(row, who, "answer")
    return row, row.run_status, who


def _lock_interaction(session: Executor, interaction_id_: str, principal: Actor, act: Act) -> tuple[Row[Any], str]:
    """Lock the interaction's step, then read the interaction, its run's status and the principal's grant.

    Answers, cancels and expiry of one step are serialized by that lock, so "was this the last pending
    one?" has one true answer. Raises ``NotFound`` for an unknown id, then as ``authorize`` for ``act``
    (before anything about its state is told).
    """
    if _is_pg(session) and session.execute(_LOCK_STEP_OF, {"iid": interaction_id_}).first() is None:
        raise NotFound(f"interaction {interaction_id_} does not exist")
    return _read_interaction(session, _INTERACTION, interaction_id_, principal, act)


def _refuse_ended_wait(session: Executor, interaction: Row[Any], run_status: str) -> None:
    """Raise ``Gone`` for a pending interaction whose wait has ended: past its deadline by the database's
    clock (the sweep will record the expiry; the outcome never depends on when it runs, nor on this host's
    clock) or its run already terminal."""
    if interaction.expires_at is not None and interaction.expires_at <= session.scalar(select(db_now())):
        state = interaction_state(session, interaction)
        state["status"] = InteractionStatus.EXPIRED.value
        raise Gone(f"interaction {interaction.id} expired at {interaction.expires_at.isoformat()}", state)
    if run_status in RUN_TERMINAL:
        raise Gone(
            f"run {interaction.run_id} of interaction {interaction.id} is {run_status}",
            interaction_state(session, interaction),
        )


@dataclass
class AnswerReceipt:
    status: str
    response_id: str
    answered_at: datetime
    continuation: Due | None = None  # set when this answer made the step's continuation due

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "response_id": self.response_id, "answered_at": self.answered_at}


_ANSWERED_AT = _bp("at", _I.c.answered_at)
_ANSWER = (
    update(_I)
    .where(_I.c.id == bindparam("iid"), _I.c.status == _literal(InteractionStatus.PENDING))
    .values(
        status=bindparam("to"),
        value=_bp("val", _I.c.value),
        secret=bindparam("sealed"),
        response_id=bindparam("rsp"),
        response_digest=bindparam("digest"),
        answered_by_id=bindparam("by"),
        answered_at=_ANSWERED_AT,
        closed_at=_ANSWERED_AT,
    )
)


def _answer_and_make_due() -> Any:
    """PostgreSQL: ``_ANSWER`` (only while the run has not ended), then ``make_due_if_settled`` when that
    was the step's last pending interaction (the step's CAS, the run back to running, the ready
    continuation ``:cid``), and the events (the answer's, then the continuation's if it was made due) as one
    statement of data-modifying CTEs. Each later part runs only if the one before it changed a row. One
    row (``answered``, and the continuation's ``due_name`` or NULL) when the answer's CAS won; none
    otherwise."""
    run_not_ended = exists().where(
        _R.c.id == _I.c.run_id, ~_R.c.status.in_(_one_of(sorted(s.value for s in RUN_TERMINAL)))
    )
    answered = _ANSWER.where(run_not_ended).returning(_I.c.id).cte("answered")
    resuming = (
        update(_S)
        .where(
            _S.c.id == bindparam("sid"),
            _S.c.status == _literal(StepStatus.PARKED),
            exists(select(answered.c.id)),
            # The statement's snapshot still shows this interaction pending: the others must not be.
            ~exists().where(
                _I.c.step_id == _S.c.id,
                _I.c.status == _literal(InteractionStatus.PENDING),
                _I.c.id != bindparam("iid"),
            ),
        )
        .values(status=StepStatus.RESUMING.value, updated_at=_bp("at", _S.c.updated_at))
        .returning(_S.c.run_id, _S.c.continuation)
        .cte("resuming")
    )
    resumed = (
        update(_R)
        # A scalar subquery, not a join with the CTE: the run is then found through its primary key. As a
        # join, the generic plan a pooled connection keeps was chosen while the table was small and
        # scanned every waiting run (a sequential scan of ``runs`` in each answer).
        .where(_R.c.id == select(resuming.c.run_id).scalar_subquery(), _R.c.status == _literal(RunStatus.WAITING))
        .values(status=RunStatus.RUNNING.value, updated_at=_bp("at", _R.c.updated_at))
        .cte("resumed")
    )
    due = (
        insert(_C)
        .from_select(
            ["id", "run_id", "step_id", "kind", "name", "status", "attempts", "publishes", "enqueued_at", "created_at"],
            select(
                bindparam("cid", type_=_C.c.id.type),
                resuming.c.run_id,
                bindparam("sid", type_=_C.c.step_id.type),
                literal(ContinuationKind.RESUME.value),
                resuming.c.continuation,
                literal(ContinuationStatus.READY.value),
                literal(0),
                literal(1),  # published right after this commit; if that publish is lost the sweep sends it again
                db_now(),  # the re-enqueue age is measured on the database's clock
                db_now(),
            ),
        )
        .returning(_C.c.run_id, _C.c.name)
        .cte("due")
    )
    events = _events_if(exists(select(answered.c.id)), exists(select(due.c.name))).cte("events")
    return (
        select(answered.c.id.label("answered"), due.c.run_id.label("due_run_id"), due.c.name.label("due_name"))
        .select_from(answered.outerjoin(due, true()))
        .add_cte(resumed, events)
    )


_ANSWER_AND_MAKE_DUE = HotStatement(_answer_and_make_due())


def answer(
    session: Executor,
    interaction_id_: str,
    *,
    value: Any,
    seal: Any,
    response_id: str,
    response_digest: str,
    principal: Actor | Credential | str,
    validate: Any,
) -> AnswerReceipt:
    """pending -> answered|rejected, first response wins.

    An exact retry (same ``response_id`` and digest) returns the first receipt. Raises ``Conflict`` when
    another response won, ``Gone`` when the wait ended unanswered, ``Forbidden`` without a live grant,
    ``InvalidAnswer`` (from ``validate``) before anything is written. When this was the step's last
    pending interaction, the step's continuation is created ready in this transaction.

    ``principal`` is an ``Actor``, a name (``Forbidden`` when no principal has it) or a ``Credential``
    (``Unauthenticated``, ``WrongKind``). On PostgreSQL that is two statements: the read that takes the
    step's lock (and reads a principal given by name or credential), then the CAS with all it implies and
    the events (``_ANSWER_AND_MAKE_DUE``).
    """
    pg = _is_pg(session)
    if pg:
        interaction, run_status, principal = _read_interaction_locked(session, interaction_id_, principal)
    else:
        principal = actor(session, principal)
        interaction, run_status = _lock_interaction(session, interaction_id_, principal, "answer")
    settled = _settled_answer(session, interaction, run_status, response_id, response_digest)
    if settled is not None:
        return settled
    validate(interaction, value)
    # Sensitive fields are stored only sealed, apart from the clear value.
    stored_value, secret = seal(interaction, value)
    new_status = InteractionStatus.ANSWERED
    if interaction.kind == InteractionKind.PERMISSION and not value.get("approved"):
        new_status = InteractionStatus.REJECTED
    now = utcnow()
    params = {
        "iid": interaction.id,
        "to": new_status.value,
        "val": stored_value,
        "sealed": secret,
        "rsp": response_id,
        "digest": response_digest,
        "by": principal.id,
        "at": now,
    }
    answered = event_row(
        interaction.run_id,
        "interaction.answered" if new_status == InteractionStatus.ANSWERED else "interaction.rejected",
        interaction_id=interaction.id,
        step_id=interaction.step_id,
        key=interaction.key,
        status=new_status.value,
        answered_by=principal.name,
    )
    receipt = AnswerReceipt(new_status.value, response_id, now)
    if not pg:
        if getattr(session.execute(_ANSWER, params), "rowcount", 0) != 1:  # pragma: no cover - the CAS backstop
            raise Conflict(f"interaction {interaction.id} was answered concurrently")
        receipt.continuation = make_due_if_settled(session, interaction.step_id, events=[answered])
        return receipt
    due = Due(new_id(), ContinuationKind.RESUME.value, interaction.run_id, interaction.step_id,
              interaction.step_continuation)  # fmt: skip
    ready = event_row(due.run_id, "continuation.ready", continuation_id=due.id, step_id=due.step_id, name=due.name)
    params.update(sid=interaction.step_id, cid=due.id, **_event_params([answered, ready]))
    combined = _ANSWER_AND_MAKE_DUE.first(session, params)
    if combined is None:
        # The read's snapshot predates its wait for the step's lock: another answer, a cancel or an expiry
        # may have committed meanwhile, or the run ended. Read again, the lock held, and say which.
        interaction, run_status = _read_interaction(session, _INTERACTION, interaction_id_, principal, "answer")
        settled = _settled_answer(session, interaction, run_status, response_id, response_digest)
        if settled is not None:
            return settled
        raise Conflict(f"interaction {interaction.id} was answered concurrently")  # pragma: no cover
    if combined.due_name is not None:
        if (combined.due_run_id, combined.due_name) != (due.run_id, due.name):  # pragma: no cover - rolls back
            raise RuntimeError(f"step {due.step_id} was made due as {combined.due_name}, not {due.name}")
        receipt.continuation = due
    return receipt


def _settled_answer(
    session: Executor, interaction: Row[Any], run_status: str, response_id: str, response_digest: str
) -> AnswerReceipt | None:
    """``None`` while the interaction can still be answered; the first receipt for an exact retry;
    otherwise raises ``Conflict`` (another response won) or ``Gone`` (the wait ended unanswered)."""
    status = interaction.status
    if status in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED):
        if interaction.response_id == response_id and interaction.response_digest == response_digest:
            assert interaction.answered_at is not None
            return AnswerReceipt(status, response_id, interaction.answered_at)
        raise Conflict(
            f"interaction {interaction.id} was already {status} by another response",
            interaction_state(session, interaction),
        )
    if status != InteractionStatus.PENDING:
        raise Gone(
            f"interaction {interaction.id} is {status}; it can no longer be answered",
            interaction_state(session, interaction),
        )
    _refuse_ended_wait(session, interaction, run_status)
    return None


# parked -> resuming, only once none of the step's interactions is pending (one statement: check and set).
_STEP_RESUMING = (
    update(_S)
    .where(
        _S.c.id == bindparam("sid"),
        _S.c.status == _literal(StepStatus.PARKED),
        ~exists().where(_I.c.step_id == _S.c.id, _I.c.status == _literal(InteractionStatus.PENDING)),
    )
    .values(status=StepStatus.RESUMING.value, updated_at=_bp("at", _S.c.updated_at))
    .returning(_S.c.run_id, _S.c.continuation)
)
_RUN_RESUMED = (
    update(_R)
    .where(_R.c.id == bindparam("rid"), _R.c.status == _literal(RunStatus.WAITING))
    .values(status=RunStatus.RUNNING.value, updated_at=_bp("at", _R.c.updated_at))
)


def make_due_if_settled(session: Executor, step_id: str, *, events: list[dict[str, Any]] | None = None) -> Due | None:
    """parked -> resuming with a ready continuation once no interaction of the step is pending.

    ``None`` while some interaction is still pending, or when the step is not parked any more. ``events``
    (the caller's, not inserted yet) are inserted before this transition's own, in one round trip.
    """
    events = list(events or [])
    now = utcnow()
    step = session.execute(_STEP_RESUMING, {"sid": step_id, "at": now}).first()
    if step is None:
        if events:
            append_events(session, events)
        return None
    session.execute(_RUN_RESUMED, {"rid": step.run_id, "at": now})
    assert step.continuation is not None
    return _insert_continuation(
        session, step.run_id, step_id, ContinuationKind.RESUME, step.continuation, events=events
    )


def cancel_digest(reason: str | None) -> str:
    """What tells an exact retry of a cancel from another cancel with the same ``response_id``."""
    return hashlib.sha256(canonical_json({"reason": reason}).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class CancelReceipt:
    response_id: str
    canceled_at: datetime
    status: str = "canceled"

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "response_id": self.response_id, "canceled_at": self.canceled_at}


def cancel(
    session: Session,
    interaction_id_: str,
    *,
    response_id: str,
    principal: Actor,
    reason: str | None,
) -> CancelReceipt:
    """pending -> canceled for the whole parked step: its pending interactions, the step and the run.

    An exact retry (same ``response_id`` and ``reason``) returns the first receipt; the same
    ``response_id`` with another reason is a ``Conflict``, as for answers (the digest of the reason is
    kept in the interaction's ``response_digest``; a cancel recorded before it was kept has none, and any
    retry of it matches). Raises ``Conflict`` when the interaction was answered, ``Gone`` when its wait
    already ended, and as ``authorize`` for who may cancel.
    """
    interaction, run_status = _lock_interaction(session, interaction_id_, principal, "cancel")
    status = interaction.status
    digest = cancel_digest(reason)
    if status == InteractionStatus.CANCELED and interaction.response_id == response_id:
        if interaction.response_digest not in (None, digest):
            raise Conflict(
                f"interaction {interaction.id} was canceled by response {response_id} with another reason",
                interaction_state(session, interaction),
            )
        assert interaction.closed_at is not None
        return CancelReceipt(response_id, interaction.closed_at)
    if status in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED):
        raise Conflict(
            f"interaction {interaction.id} was already {status}; it cannot be canceled",
            interaction_state(session, interaction),
        )
    if status != InteractionStatus.PENDING:
        raise Gone(f"interaction {interaction.id} is {status}", interaction_state(session, interaction))
    _refuse_ended_wait(session, interaction, run_status)
    now = utcnow()
    why = reason or f"canceled by {principal.name}"
    closed = session.scalars(
        update(Interaction)
        .where(Interaction.step_id == interaction.step_id, Interaction.status == InteractionStatus.PENDING)
        .values(status=InteractionStatus.CANCELED, closed_at=now, reason=why)
        .returning(Interaction)
        .execution_options(synchronize_session=False)
    ).all()
    session.execute(
        update(Interaction)
        .where(Interaction.id == interaction.id)
        .values(response_id=response_id, response_digest=digest, closed_by_id=principal.id)
    )
    for i in closed:
        append_event(
            session,
            i.run_id,
            "interaction.canceled",
            interaction_id=i.id,
            step_id=i.step_id,
            key=i.key,
            canceled_by=principal.name,
        )
    step = session.get_one(Step, interaction.step_id)
    finish_run(session, step, status=RunStatus.CANCELED, execution_id=f"cancel:{response_id}", reason=why)
    return CancelReceipt(response_id, now)


@dataclass
class Expiry:
    expired: bool
    continuation: Due | None = None  # set when the expiry made the step's continuation due


def expire_due(session: Session, interaction_id_: str) -> Expiry:
    """pending -> expired past ``expires_at`` (the database's clock); the step's continuation becomes due
    as for an answer.

    Locks the step first, like answer and cancel (one lock order, no deadlock); a step locked by an
    answer in flight is skipped this pass. ``expired`` is False when the CAS lost.
    """
    step_id = session.scalar(select(Interaction.step_id).where(Interaction.id == interaction_id_))
    if step_id is None:
        return Expiry(False)
    if _is_pg(session):
        locked = session.scalar(select(Step.id).where(Step.id == step_id).with_for_update(skip_locked=True))
        if locked is None:
            return Expiry(False)
    expired = session.scalar(
        update(Interaction)
        .where(
            Interaction.id == interaction_id_,
            Interaction.status == InteractionStatus.PENDING,
            Interaction.expires_at <= db_now(),
        )
        .values(status=InteractionStatus.EXPIRED, closed_at=db_now())
        .returning(Interaction)
        .execution_options(synchronize_session=False)
    )
    if expired is None:
        return Expiry(False)
    append_event(
        session,
        expired.run_id,
        "interaction.expired",
        interaction_id=expired.id,
        step_id=expired.step_id,
        key=expired.key,
    )
    return Expiry(True, make_due_if_settled(session, expired.step_id))


# --------------------------------------------------------------------------- sweep selections


def _skip_locked(session: Session, stmt: Any) -> Any:
    return stmt.with_for_update(skip_locked=True) if _is_pg(session) else stmt


def mark_for_republish(session: Session, *, older_than_s: float, batch: int) -> list[str]:
    """ready continuations not enqueued in the last ``older_than_s`` seconds of the database's clock: stamp
    ``enqueued_at`` (CAS) and return ids.

    Concurrent sweeps skip each other's locked rows and the CAS on ``enqueued_at`` keeps one winner.
    """
    older_than = db_now(-older_than_s)
    ids = session.scalars(
        _skip_locked(
            session,
            select(Continuation.id)
            .where(
                Continuation.status == _literal(ContinuationStatus.READY),
                or_(Continuation.enqueued_at.is_(None), Continuation.enqueued_at < older_than),
            )
            .order_by(Continuation.enqueued_at.asc().nulls_first())
            .limit(batch),
        )
    ).all()
    if not ids:
        return []
    won = session.scalars(
        update(Continuation)
        .where(
            Continuation.id.in_(ids),
            Continuation.status == ContinuationStatus.READY,
            or_(Continuation.enqueued_at.is_(None), Continuation.enqueued_at < older_than),
        )
        .values(enqueued_at=db_now(), publishes=Continuation.publishes + 1)
        .returning(Continuation.id)
        .execution_options(synchronize_session=False)
    ).all()
    return list(won)


def expired_claims(session: Session, *, batch: int) -> list[Continuation]:
    """claimed continuations whose lease ran out by the database's clock (the process running the body died)."""
    return list(
        session.scalars(
            _skip_locked(
                session,
                select(Continuation)
                .where(Continuation.status == _literal(ContinuationStatus.CLAIMED))
                .where(Continuation.lease_expires_at < db_now())
                .order_by(Continuation.lease_expires_at)
                .limit(batch),
            )
        ).all()
    )


def release_expired_claim(session: Session, continuation_id: str) -> Continuation | None:
    """claimed (lease expired) -> ready, stamped as enqueued now; ``None`` if it changed meanwhile."""
    return session.scalar(
        update(Continuation)
        .where(
            Continuation.id == continuation_id,
            Continuation.status == ContinuationStatus.CLAIMED,
            Continuation.lease_expires_at < db_now(),
        )
        .values(
            status=ContinuationStatus.READY,
            claimed_by=None,
            lease_expires_at=None,
            enqueued_at=db_now(),
            publishes=Continuation.publishes + 1,
        )
        .returning(Continuation)
        .execution_options(synchronize_session=False)
    )


def expirable_interactions(session: Session, *, batch: int) -> list[str]:
    """pending interactions past their expiry (unlocked: ``expire_due`` takes the step lock, then CASes)."""
    return list(
        session.scalars(
            select(Interaction.id)
            .where(
                Interaction.status == _literal(InteractionStatus.PENDING),
                Interaction.expires_at.is_not(None),
                Interaction.expires_at <= db_now(),
            )
            .order_by(Interaction.expires_at)
            .limit(batch)
        ).all()
    )


def continuation_kinds(session: Session, ids: Sequence[str]) -> list[tuple[str, str]]:
    if not ids:
        return []
    rows = session.execute(select(Continuation.id, Continuation.kind).where(Continuation.id.in_(list(ids))))
    return [(r[0], r[1]) for r in rows]


# --------------------------------------------------------------------------- reviews


def start_review(session: Session, *, run_id: str, step_id: str, kind: str, execution_id: str) -> Review:
    """-> running: a review receipt, owned by the execution that started it."""
    now = utcnow()
    review = Review(
        id=new_id(),
        run_id=run_id,
        step_id=step_id,
        kind=kind,
        status=ReviewStatus.RUNNING,
        finding_count=0,
        verification_count=0,
        execution_id=execution_id,
        created_at=now,
        updated_at=now,
    )
    session.add(review)
    session.flush()
    append_event(session, run_id, "review.started", review_id=review.id, step_id=step_id, kind=kind)
    return review


def review_progress(
    session: Session, review_id: str, *, execution_id: str, finding_count: int, verification_count: int
) -> Review | None:
    """running -> running with new counts, only by its owner; ``None`` when not running or not owned."""
    return session.scalar(
        update(Review)
        .where(Review.id == review_id, Review.status == ReviewStatus.RUNNING, Review.execution_id == execution_id)
        .values(finding_count=finding_count, verification_count=verification_count, updated_at=utcnow())
        .returning(Review)
        .execution_options(synchronize_session=False)
    )


def record_review(
    session: Session,
    review_id: str,
    *,
    execution_id: str,
    verdict: str,
    finding_count: int,
    verification_count: int,
    failed: bool = False,
) -> Review | None:
    """running -> completed|failed with its verdict and counts; ``None`` when not running or not owned."""
    status = ReviewStatus.FAILED if failed else ReviewStatus.COMPLETED
    review = session.scalar(
        update(Review)
        .where(Review.id == review_id, Review.status == ReviewStatus.RUNNING, Review.execution_id == execution_id)
        .values(
            status=status,
            verdict=verdict,
            finding_count=finding_count,
            verification_count=verification_count,
            updated_at=utcnow(),
        )
        .returning(Review)
        .execution_options(synchronize_session=False)
    )
    if review is not None:
        append_event(
            session, review.run_id, f"review.{status.value}", review_id=review.id, verdict=verdict,
            finding_count=finding_count, verification_count=verification_count,
        )  # fmt: skip
    return review


_ANY_RUNNING_REVIEW = (
    select(_V.c.id).where(_V.c.status == _literal(ReviewStatus.RUNNING), _V.c.step_id == bindparam("sid")).limit(1)
)


def running_reviews(session: Session, step_id: str) -> list[Review]:
    """The step's running reviews (first asked on the ``running`` partial index: almost always none)."""
    if session.execute(_ANY_RUNNING_REVIEW, {"sid": step_id}).first() is None:
        return []
    return list(
        session.scalars(select(Review).where(Review.step_id == step_id, Review.status == ReviewStatus.RUNNING)).all()
    )


def _owner_alive() -> Any:
    return (
        select(Continuation.id)
        .where(
            Continuation.claimed_by == Review.execution_id,
            Continuation.status == _literal(ContinuationStatus.CLAIMED),
            Continuation.lease_expires_at >= db_now(),
        )
        .exists()
    )


def stranded_reviews(session: Session, *, batch: int) -> list[Review]:
    """running reviews whose owning execution no longer holds a live claim (it died or moved on)."""
    return list(
        session.scalars(
            _skip_locked(
                session,
                select(Review)
                .where(Review.status == _literal(ReviewStatus.RUNNING), ~_owner_alive())
                .order_by(Review.created_at)
                .limit(batch),
            )
        ).all()
    )


def interrupt_review(session: Session, review: Review, *, evidence: str) -> Review | None:
    """running -> interrupted; only status, verdict and reason change (the counts are kept)."""
    reason = (
        f"owner execution {review.execution_id} is gone ({evidence}); "
        f"{review.finding_count} findings and {review.verification_count} verifications were recorded"
    )
    done = session.scalar(
        update(Review)
        .where(Review.id == review.id, Review.status == ReviewStatus.RUNNING)
        .values(status=ReviewStatus.INTERRUPTED, verdict="incomplete", reason=reason, updated_at=utcnow())
        .returning(Review)
        .execution_options(synchronize_session=False)
    )
    if done is not None:
        append_event(session, done.run_id, "review.interrupted", review_id=done.id, reason=reason)
    return done


def owner_evidence(session: Session, execution_id: str) -> str:
    """What is known of an execution: the continuation it claimed and what became of it."""
    row = session.scalar(select(Continuation).where(Continuation.claimed_by == execution_id))
    if row is None:
        return "its claim was released after its lease expired"
    if row.status == ContinuationStatus.CLAIMED:
        return f"its lease on continuation {row.id} expired at {row.lease_expires_at}"
    return f"continuation {row.id} it ran is {row.status}"


# --------------------------------------------------------------------------- projections


def lock_run_for_projection(session: Session, run_id: str) -> Run | None:
    """The run, locked for its projector; ``None`` when unknown or another projector holds it."""
    run: Run | None = session.scalar(_skip_locked(session, select(Run).where(Run.id == run_id)))
    return run


def record_schedule_history(session: Session, run: Run) -> ScheduleHistory:
    """Write (or correct) the run's schedule-history row to its canonical terminal record."""
    assert run.completed_at is not None and run.finished_by is not None
    row = session.get(ScheduleHistory, run.id)
    status, _ = normalize_run_status(run.status)
    values = {"status": status.value, "completed_at": run.completed_at, "execution_id": run.finished_by}
    if row is None:
        row = ScheduleHistory(run_id=run.id, workflow=run.workflow, recorded_at=utcnow(), **values)
        session.add(row)
    else:
        for key, value in values.items():
            setattr(row, key, value)
    session.flush()
    return row


_CLEAR_PROJECTION = (
    update(_R)
    .where(
        _R.c.id == bindparam("rid"),
        _R.c.projection_pending.is_(True),
        _R.c.status == bindparam("was"),
        _R.c.finished_by == bindparam("by"),
    )
    .values(projection_pending=False, projection_attempts=0, projection_next_at=None)  # a success clears the back-off
)


def clear_projection_pending(session: Session, run: RunRecord | Run) -> bool:
    """projection_pending -> done, only while the run's terminal record is what was projected."""
    result = session.execute(_CLEAR_PROJECTION, {"rid": run.id, "was": run.status, "by": run.finished_by})
    return getattr(result, "rowcount", 0) == 1


def _clear_projections() -> Any:
    """PostgreSQL: ``_CLEAR_PROJECTION`` for many runs as one statement, its (id, status, finished_by)
    triples given as three arrays."""
    given = func.unnest(
        *(bindparam(name, type_=ARRAY(String)) for name in ("rids", "was", "by"))
    ).table_valued("rid", "was", "by").render_derived(name="given")  # fmt: skip
    return (
        update(_R)
        .where(
            _R.c.id == given.c.rid,
            _R.c.projection_pending.is_(True),
            _R.c.status == given.c.was,
            _R.c.finished_by == given.c.by,
        )
        .values(projection_pending=False, projection_attempts=0, projection_next_at=None)
    )


_CLEAR_PROJECTIONS = _clear_projections()


def clear_projections_pending(session: Session, runs: Sequence[RunRecord | Run]) -> int:
    """``clear_projection_pending`` for several runs: how many were cleared. On PostgreSQL one statement
    (an executemany, even pipelined, costs a Bind and an Execute per run; bench/RESULTS.md has the figure)."""
    if len(runs) == 1:
        return int(clear_projection_pending(session, runs[0]))
    if _is_pg(session):
        arrays = {"rids": [r.id for r in runs], "was": [r.status for r in runs], "by": [r.finished_by for r in runs]}
        result = session.execute(_CLEAR_PROJECTIONS, arrays)
    else:
        params = [{"rid": run.id, "was": run.status, "by": run.finished_by} for run in runs]
        result = session.execute(_CLEAR_PROJECTION, params)
    return int(getattr(result, "rowcount", 0) or 0)


# --------------------------------------------------------------------------- sweep totals


def record_sweep(session: Session, counts: dict[str, int], *, duration_s: float) -> None:
    """Add one pass's counts to the running totals (an upsert per category)."""
    now = utcnow()
    if _is_pg(session):
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:
        from sqlalchemy.dialects.sqlite import insert as dialect_insert  # type: ignore[assignment]
    for category, count in counts.items():
        stmt = dialect_insert(SweepTotal).values(
            category=category, total=count, last_count=count, last_duration_s=duration_s, last_at=now
        )
        session.execute(
            stmt.on_conflict_do_update(
                index_elements=[SweepTotal.category],
                set_={
                    "total": SweepTotal.total + count,
                    "last_count": count,
                    "last_duration_s": duration_s,
                    "last_at": now,
                },
            )
        )
