"""The push runner (docs/worker-protocol.md, "Push"): a continuation a push handler serves is POSTed to its
URL, and the JSON answer is the outcome; claim, commit and the rest are the executor's (``tasks.executor``),
as for a Python body or a remote worker's completion.

A Celery worker that claims such work (it runs nothing of it) hands it on to the push queue
(``executor.hand_on``, ``tasks.publish``); this task claims it again, under a lease of the webhooks'
timeout x ``PHASES`` (the longest one POST can last, so a slow handler never holds the claim past it), and
POSTs the item a lease call would return (``tasks.remote.item_of``), signed as a webhook delivery with the
handler's secret, ``webhook-id`` = ``push_<continuation id>``: the same on every retry of that continuation.

- a 2xx with an outcome: committed (``sent_outcome``, ``executor.commit`` with a receipt), and the handler
  live for ``PARKWAY_PUSH_LIVE_S`` more (``store.accepted``: a push handler is live by its own success);
- a 2xx whose body is not JSON, not an outcome, or one that cannot be committed: the run **fails** with the
  error (the handler's code answered it: the workflow's verdict, as a Python body returning a bad outcome);
- a 410: "not served here" (a handler mid-deploy that lacks the key): the handler no longer serves the key
  (``store.refuse``), and the work is **handed on**, no attempt spent, as any work a runner does not run
  (``executor.hand_on``): whoever serves the key takes it when the sweep publishes it again; none past the
  grace, it is interrupted;
- answers that hold sensitive values, for a handler whose URL is plain http outside the allowed networks:
  nothing is sent, and the step is **interrupted** with ``EXPOSED`` (no retry would send them either);
- anything else (a timeout, a lost connection, a 5xx, another status): **released**, the attempt spent, due
  again when the sweep publishes it (``PARKWAY_REENQUEUE_AFTER_S``); out of attempts, the run is interrupted
  as after a crash loop.
"""

from __future__ import annotations

import functools
import json
import logging
import secrets
from datetime import timedelta

from pydantic import TypeAdapter, ValidationError

from models import store
from models.base import utcnow
from models.jsonsafe import storable_text
from models.outcome import OUTCOME, Fail, Outcome
from parkway import tracing
from parkway.crypto import unseal
from parkway.db import single_statement, transaction
from parkway.errors import InvalidOutcome
from parkway.netguard import Exposed
from parkway.settings import get_settings
from tasks import executor
from tasks.celery_app import PUSH_STEP, app
from tasks.publish import TRACEPARENT
from tasks.remote import Item, digest, item_of
from tasks.serving import sent_outcome
from tasks.webhook_http import PHASES, Connections, Sent, client, post

log = logging.getLogger("parkway.push")

NOT_HERE = 410  # a handler's answer for work it does not serve (now): handed on, as work a worker does not run
# The reason of a step whose answers hold sensitive values that its push handler's URL may not receive.
EXPOSED = "sensitive values go to a push handler only over https or to an allowed network"
MAX_ANSWER_BYTES = 1024 * 1024  # an outcome is read this far (the API's own body bound)
_ITEM = TypeAdapter(Item)


@functools.cache
def _http() -> Connections:
    """The connections of this worker process, made on its first push: pushes reuse them, kept alive to
    the handlers (bench/RESULTS.md)."""
    return client()


def message_id(continuation_id: str) -> str:
    """``webhook-id`` of a push: the same on every retry of one continuation."""
    return f"push_{continuation_id}"


@app.task(name=PUSH_STEP, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def push_step(continuation_id: str) -> str:
    """POST one continuation to the push handler that serves it; commit what it answers (exactly once). In a
    span as a Celery worker's execution (``tasks.worker``); the item POSTed carries its ``traceparent``."""
    published = tracing.publisher(push_step.request.get(TRACEPARENT))
    with tracing.span(PUSH_STEP, kind="consumer", root=True, follows=published, continuation_id=continuation_id):
        return push(continuation_id)


def push(continuation_id: str) -> str:
    """Claim, POST, then commit, hand on or release; returns what happened (for logs and tests)."""
    lease_id = f"{continuation_id}.{secrets.token_hex(8)}"  # shaped as a lease id; held by no principal
    lease_s = get_settings().webhook_timeout_s * PHASES
    extra: executor.Extra = {"continuation_id": continuation_id, "execution_id": lease_id}
    claim = executor.claim(continuation_id, lease_id, lease_s, extra)
    if isinstance(claim, str):
        return claim
    with single_statement() as conn:
        target = store.handler_serving(conn, claim.continuation.kind, claim.continuation.name)
    if target is None:  # removed since: whoever serves it now gets it
        return executor.hand_on(claim, lease_id, extra, resend=False)
    try:
        sent = _post(claim, target, lease_id, lease_s)
    except Exposed as exc:  # nothing sent, and no retry would send it: the system's verdict
        log.warning("push handler %s: %s; not sent", target.id, exc, extra={**extra, "action": "push"})
        why = f"{EXPOSED}: push handler {target.id} is plain http outside PARKWAY_WEBHOOK_ALLOWED_NETWORKS"
        return _commit(claim, lease_id, store.Interruption(why), extra)
    outcome, good = answered(sent, target.id, claim.continuation.name)
    with transaction() as session:  # counted; and the handler's record: live by its success, a 410 refuses the key
        store.count_push(session, target.id, failed=not good)
        if good:
            store.accepted(session, target.id, claim.continuation.name, get_settings().push_live_s)
        elif sent.status_code == NOT_HERE:
            store.refuse(session, target.id, claim.continuation.kind, claim.continuation.name)
    if sent.status_code == NOT_HERE:
        return executor.hand_on(claim, lease_id, extra, resend=False)  # resend: this handler may be picked again
    if outcome is None:
        return _retry(claim, lease_id, _failure(sent, target.id), extra)
    return _commit(claim, lease_id, outcome, extra)


def _post(claim: store.Claim, target: store.Target, lease_id: str, lease_s: float) -> Sent:
    """POST the claimed continuation's item to its handler, signed; ``Exposed`` (nothing sent) when it holds
    sensitive values that the handler's URL may not receive (``webhook_http.post``, ``confidential``)."""
    sensitive = any(answer.sealed is not None for answer in claim.answers.values())  # item_of unseals them
    item = item_of(claim, lease_id, utcnow() + timedelta(seconds=lease_s), traceparent=tracing.traceparent())
    return post(_http(), target.url, secrets=[unseal(target.secret_sealed)],
                msg_id=message_id(claim.continuation.id), body=_ITEM.dump_json(item), max_bytes=MAX_ANSWER_BYTES,
                agent="parkway-push", confidential=sensitive, traceparent=item.traceparent)  # fmt: skip


def answered(sent: Sent, handler_id: str, key: str) -> tuple[Outcome | None, bool]:
    """What the handler's answer means, and whether it was a committable outcome: its outcome, the run
    failed (an answer that is no committable outcome), or ``None``: no answer to act on (a 410, or retried)."""
    if not sent.ok:
        return None, False
    problem = "over 1 MiB" if sent.cut else None
    if problem is None:
        try:
            return sent_outcome(OUTCOME.validate_python(json.loads(sent.body)), f"push {key}"), True
        except json.JSONDecodeError as exc:
            problem = f"not JSON ({exc.msg})"
        except ValidationError as exc:
            problem = f"not an outcome ({exc.error_count()} errors: {exc.errors()[0]['msg']})"
        except InvalidOutcome as exc:
            problem = f"an outcome that cannot be committed ({exc})"
    return Fail(storable_text(f"push handler {handler_id} answered {sent.status_code} with {problem}")), False


def _failure(sent: Sent, handler_id: str) -> str:
    return f"push handler {handler_id}: {sent.error or f'answered {sent.status_code}'}"


def _retry(claim: store.Claim, lease_id: str, why: str, extra: executor.Extra) -> str:
    """Released, the attempt spent (``executor.release``): due again when the sweep publishes it; out of
    attempts, the run interrupted with ``why`` as after a crash loop."""
    log.warning("%s; retried", why, extra={**extra, "action": "push"})
    released = executor.release(claim.continuation.id, lease_id, why, extra)
    return "lost" if released == "lost" else "retry"


def _commit(claim: store.Claim, lease_id: str, outcome: Outcome | store.Interruption, extra: executor.Extra) -> str:
    completion = None
    if not isinstance(outcome, store.Interruption):
        completion = store.Completion(lease_id, digest(outcome))
    with transaction() as session:  # the answers are read again: the claim's were unsealed for the item
        claim = store.load_claim(session, claim.continuation)
    committed = executor.commit(claim, outcome, lease_id, extra, completion=completion)
    return "lost" if committed is None else "committed"
