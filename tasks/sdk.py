"""The workflow SDK: declare steps and continuations, start runs, answer and cancel."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from models import jsonsafe, store
from models.outcome import OUTCOME
from models.status import ContinuationKind, PrincipalKind
from models.store import Actor, Answer, TokenHolder
from parkway.crash import crash_point
from parkway.db import core_transaction, single_statement, transaction
from parkway.errors import (
    Conflict,
    Forbidden,
    Gone,
    InvalidAnswer,
    InvalidPayload,
    NotFound,
    NotRegistered,
    WorkflowError,
)
from parkway.settings import get_settings
from tasks import references, registry
from tasks.holding import own_write
from tasks.outcomes import Complete, Fail, Next, Park, Question, interaction_specs
from tasks.publish import publish
from tasks.serving import sent_outcome, step_known
from tasks.tooltypes import Permission, PermissionRejected, PossiblyRan, ToolFailed

__all__ = [
    "Answer",
    "Complete",
    "Conflict",
    "Context",
    "Fail",
    "Forbidden",
    "Gone",
    "InvalidAnswer",
    "InvalidPayload",
    "Next",
    "NotFound",
    "NotRegistered",
    "Park",
    "Permission",
    "PermissionRejected",
    "PossiblyRan",
    "Question",
    "ToolFailed",
    "answer",
    "cancel",
    "continuation",
    "delegate",
    "start_run",
    "step",
]

F = TypeVar("F", bound=Callable[..., Any])


# --------------------------------------------------------------------------- declaring


def step(name: str, *, payload: Any = None) -> Callable[[F], F]:
    """Register ``fn(ctx, payload)`` as the body of step ``name`` (a workflow is its first step). With
    ``payload`` (a pydantic model, or a JSON Schema as a dict) a start whose payload does not match is refused
    (``InvalidPayload``, nothing stored) and the body receives the model's instance (or the checked dict)."""

    def decorate(fn: F) -> F:
        registry.register_step(name, fn, payload)
        references.mark(fn, ContinuationKind.START, name)  # so ``Next(fn)`` names it
        return fn

    return decorate


def continuation(name: str, *, version: int) -> Callable[[F], F]:
    """Register ``fn(ctx, snapshot, answers)`` as continuation ``name@version``."""

    def decorate(fn: F) -> F:
        registry.register_continuation(name, version, fn)
        key = registry.continuation_key(name, version)
        references.mark(fn, ContinuationKind.RESUME, key)  # so ``Park(continuation=fn)`` names it
        return fn

    return decorate


@dataclass
class Context:
    """What a body knows of where it runs. ``in_commit`` callbacks run inside the commit transaction."""

    run_id: str
    step_id: str
    attempt: int
    execution_id: str
    step_name: str = ""
    payload: Any = None
    journal_step_id: str = ""  # the step whose tool-call journal this body uses (kept across a preflight)
    in_step_body: bool = True
    commit_hooks: list[Callable[[Any], None]] = field(default_factory=list, repr=False)  # from ``in_commit``
    started_reviews: list[str] = field(default_factory=list, repr=False)  # ids of reviews this execution began
    tool_keys: set[str] = field(default_factory=set, repr=False)  # keys used by this execution

    def tool(
        self,
        name: str,
        *,
        key: str,
        args: Any,
        replay: str,
        run: Callable[[], Any],
        permissions: Sequence[Permission] = (),
    ) -> Any:
        """Run a side effect through the durable journal (see ``tasks.tools.run_tool``)."""
        from tasks.tools import run_tool

        return run_tool(self, name, key=key, args=args, replay=replay, run=run, permissions=permissions)

    def in_commit(self, fn: Callable[[Any], None]) -> None:
        """Run ``fn(session)`` inside the transaction that commits this step: it happens exactly once."""
        self.commit_hooks.append(fn)

    def set_title(self, title: str) -> None:
        """Say what the run is about, in a line a person recognises ("Deploy billing to prod"): its cards on
        the Decisions page and its page lead with it. Written with this step's commit (the latest wins)."""
        if not isinstance(title, str) or not title.strip() or len(title) > 200 or jsonsafe.text_problem(title):
            raise WorkflowError("a run's title is a line of 1 to 200 characters")
        line = " ".join(title.split())

        def titled(session: Any) -> None:
            store.set_title(session, self.run_id, line)  # False once the run ended: nothing to say then

        self.in_commit(titled)

    def start_review(self, kind: str) -> str:
        """Commit a ``running`` review receipt now (its own transaction) and return its id."""
        if not kind:
            raise WorkflowError("a review needs a kind")
        with own_write(self) as session:
            review_id = store.start_review(
                session, run_id=self.run_id, step_id=self.step_id, kind=kind, execution_id=self.execution_id
            )
        self.started_reviews.append(review_id)
        return review_id

    def review_progress(self, review_id: str, *, finding_count: int, verification_count: int) -> None:
        """Commit the counts of a running review now, so they survive a crash of this execution."""
        with own_write(self) as session:
            if store.review_progress(
                session, review_id, execution_id=self.execution_id,
                finding_count=finding_count, verification_count=verification_count,
            ) is None:  # fmt: skip
                raise WorkflowError(f"review {review_id} is not running under this execution")

    def record_review(
        self,
        review_id: str,
        verdict: str,
        finding_count: int,
        verification_count: int,
        *,
        failed: bool = False,
    ) -> None:
        """Commit the review's completion now; an empty verdict is refused."""
        if not verdict or not verdict.strip():
            raise WorkflowError(f"review {review_id} needs a verdict")
        with own_write(self) as session:
            if store.record_review(
                session, review_id, execution_id=self.execution_id, verdict=verdict,
                finding_count=finding_count, verification_count=verification_count, failed=failed,
            ) is None:  # fmt: skip
                raise WorkflowError(f"review {review_id} is not running under this execution")


# --------------------------------------------------------------------------- starting runs


def request_digest(workflow: str, payload: Any, target: str, park: Park | None = None) -> str:
    request = [workflow, payload, target] if park is None else [workflow, payload, target, OUTCOME.dump_python(park)]
    return hashlib.sha256(store.canonical_json(request).encode()).hexdigest()


def start_run(
    workflow: str,
    payload: Any,
    *,
    principal: str,
    target: str,
    idempotency_key: str | None = None,
    park: Park | None = None,
) -> str:
    """Start a run of ``workflow`` owned by ``principal`` (an agent granted on ``target``); returns its id.

    Raises ``InvalidPayload`` when ``payload`` does not match what the workflow's step declares (in this
    process's registry), ``NotRegistered`` for a workflow no worker has ever run (neither this process nor any worker,
    Celery or remote, ever advertised it: a typo) and ``Forbidden`` without a grant; nothing is stored then;
    one whose workers are down now waits for them. With ``idempotency_key``, a retry
    returns the same run and a different body raises ``Conflict``. With ``park`` (an agent that runs its
    own loop), the first step is parked at once, in the run's transaction (a version nothing serves now waits
    for its worker, as any wait): its body never runs here. The park, too, addresses only targets
    ``principal`` is granted on and names only live people (else ``ParkRefused``, a ``Forbidden``).
    """
    if park is None and not step_known(workflow):
        raise NotRegistered(f"workflow {workflow} is not a registered step")
    specs = None
    if park is not None:
        sent_outcome(park, f"the park of a run of {workflow}")  # raises InvalidOutcome: nothing is stored
        specs = interaction_specs(park.interactions)
    jsonsafe.require_storable({"payload": payload, "target": target, "idempotency_key": idempotency_key}, "the run")
    registry.checked_payload(workflow, payload)  # InvalidPayload: nothing is stored
    with transaction() as session:
        owner = _principal(session, principal)
        if owner.kind != PrincipalKind.AGENT:
            raise Forbidden(f"principal {principal} is a {owner.kind}; runs are started by agents")
        if not store.is_granted(session, owner, target):
            raise Forbidden(f"principal {principal} holds no grant on target {target}")
        run, due = store.create_run(
            session,
            workflow=workflow,
            payload=payload,
            owner=owner,
            target=target,
            idempotency_key=idempotency_key,
            request_digest=request_digest(workflow, payload, target, park),
            start=park is None,
        )
        run_id = run.id
        if park is not None and specs is not None and due is not None:
            first = store.StepRef(due.step_id, due.run_id, workflow, payload, None)
            store.park(session, first, continuation=park.continuation, snapshot=park.snapshot, interactions=specs,
                       from_continuation=False)  # fmt: skip
            due = None  # its step is parked: nothing to run
        to_publish = [due] if due is not None and not due.remote else []  # remote: leased
    publish(to_publish, retry=False)  # once: the sweep relays a lost publish; never slow a caller
    return run_id


def _principal(session: Any, name: str | Actor) -> Any:
    """The principal by name, or as the caller already read it (the API authenticated it this request)."""
    if not isinstance(name, str):
        return name
    found = store.principal_by_name(session, name)
    if found is None:
        raise store.unknown_principal(name)
    return found


# --------------------------------------------------------------------------- answering


def response_digest(value: Any) -> str:
    """A keyed digest of a response value: recognizes an exact retry without keeping the value."""
    key = get_settings().resolved_secret_key().encode()
    return hmac.new(key, store.canonical_json(value).encode(), hashlib.sha256).hexdigest()


def answer(
    interaction_id: str,
    value: Any,
    *,
    response_id: str,
    principal: str | Actor | TokenHolder,
    link: str | None = None,
    justification: str | None = None,
) -> dict[str, Any]:
    """Answer an interaction as ``principal`` (a name, the principal the caller has just authenticated, or the
    holder of a token, read in the answer's first statement: ``models.store.TokenHolder``):
    first response wins, an exact retry gets the same receipt. Through an approval link (``link``, its id:
    ``models.links``), the link is used in the answer's transaction with ``justification``: both or neither.

    Returns ``{status, response_id, answered_at}``; raises ``Conflict``, ``Gone``, ``InvalidAnswer``,
    ``Forbidden`` (``WrongKind`` for an agent) or ``NotFound`` carrying the authoritative state. The step's
    continuation is published only after the answer that made it due has committed.
    """
    if not response_id:
        raise InvalidAnswer("a response_id is required so that retries can be recognized")
    if (problem := jsonsafe.json_problem({"response_id": response_id, "value": value})) is not None:
        raise InvalidAnswer(f"the answer is not JSON Parkway can store ({problem})", errors=[problem])
    digest = response_digest(value)
    receipt = None
    if link is None:  # one call in autocommit (``None``: a quorum wait, answered in a transaction)
        with single_statement() as conn:
            receipt = store.answer(conn, interaction_id, value=value, response_id=response_id,
                                   response_digest=digest, principal=principal)  # fmt: skip
    if receipt is None:
        with core_transaction() as conn:
            receipt = store.answer(conn, interaction_id, value=value, response_id=response_id,
                                   response_digest=digest, principal=principal)  # fmt: skip
            assert receipt is not None  # in a transaction, a quorum wait is responded to
            if link is not None and not store.use_link(conn, link, response_id=response_id,
                                                       justification=justification):  # fmt: skip
                raise Conflict(f"approval link {link} was used already, or has expired")
    due = receipt.continuation
    to_publish = [due] if due is not None and not due.remote else []  # remote: leased
    crash_point("answer.after_commit")
    publish(to_publish, retry=False)  # once: the sweep relays a lost publish; never slow a caller
    return receipt.as_dict()


def delegate(interaction_id: str, to: str, *, principal: str | Actor, note: str | None = None) -> dict[str, Any]:
    """Move the place ``principal`` holds on a pending wait to the person ``to`` (docs/teams.md): ``to``
    answers in it, ``principal`` no more. Returns ``{interaction_id, to, by, note, at, place}``; raises
    ``InvalidAnswer`` (to oneself, to one who could never answer, around a cycle), ``Conflict`` (it
    responded already; the wait was decided), ``Gone`` (the wait ended), ``Forbidden`` (it holds no place)
    or ``NotFound``."""
    with transaction() as session:
        made = store.delegate(session, interaction_id, principal=_principal(session, principal), to=to, note=note)
    return dataclasses.asdict(made)


def cancel(
    interaction_id: str, *, response_id: str, principal: str | Actor, reason: str | None = None
) -> dict[str, Any]:
    """Cancel the parked step of an interaction: its pending interactions, the step and the run.

    Returns ``{status: "canceled", response_id, canceled_at}``; raises like ``answer``.
    """
    if not response_id:
        raise InvalidAnswer("a response_id is required so that retries can be recognized")
    with transaction() as session:
        receipt = store.cancel(session, interaction_id, response_id=response_id, principal=principal, reason=reason)
    from tasks.projection import project_quietly

    project_quietly([receipt.run_id])
    return receipt.as_dict()
