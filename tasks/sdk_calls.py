"""The SDK's running half (``tasks.sdk`` re-exports it): start runs, answer, delegate and cancel. Imported on
first use, so a workflow module's import (the declaring half) needs neither the store nor Celery."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from typing import Any

from models import jsonsafe, run_start, store
from models.outcome import OUTCOME, Park
from models.store import Actor, TokenHolder
from parkway.crash import crash_point
from parkway.db import core_transaction, single_statement, transaction
from parkway.errors import Conflict, InvalidAnswer, NotRegistered
from parkway.settings import get_settings
from tasks import registry
from tasks.outcomes import interaction_specs
from tasks.publish import publish
from tasks.serving import sent_outcome, step_known


def request_digest(workflow: str, payload: Any, target: str, park: Park | None = None) -> str:
    return run_start.request_digest(workflow, payload, target, None if park is None else OUTCOME.dump_python(park))


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
        run_start.may_start(owner.name, owner.kind, target, lambda: store.is_granted(session, owner, target))
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
