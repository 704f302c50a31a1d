"""Push (docs/worker-protocol.md, "Push"): a continuation a push handler serves is POSTed to its URL, and the
JSON answer is the outcome, committed by the same compare-and-set as a Python body's or a pull completion's.

A Celery worker that claims such work (it runs nothing of it) hands it on to the push queue
(``tasks.worker.hand_on``, ``tasks.publish``); this task claims it again, under a lease of the webhooks'
timeout x ``PHASES`` (the longest one POST can last, so a slow handler never holds the claim past it), and
POSTs the item a lease call would return (``tasks.remote.item_of``), signed as a webhook delivery with the
handler's secret, ``webhook-id`` = ``push_<continuation id>``: the same on every retry of that continuation.

- a 2xx with an outcome: committed (``sent_outcome``, ``store.commit_outcome`` with a receipt);
- a 2xx whose body is not JSON, not an outcome, or one that cannot be committed: the run **fails** with the
  error (the handler's code answered it: the workflow's verdict, as a Python body returning a bad outcome);
- a 410: the step is **interrupted**, "this version is gone" (the handler no longer runs it);
- answers that hold sensitive values, for a handler whose URL is plain http outside the allowed networks:
  nothing is sent, and the step is **interrupted** with ``EXPOSED`` (no retry would send them either);
- anything else (a timeout, a lost connection, a 5xx, another status): the claim released with the attempt
  counted, due again when the sweep publishes it (``PARKWAY_REENQUEUE_AFTER_S``); out of attempts, the run is
  interrupted as after a crash loop.
"""

from __future__ import annotations

import functools
import json
import logging
import secrets
from datetime import timedelta
from typing import Any

from pydantic import TypeAdapter, ValidationError

from models import store
from models.base import utcnow
from models.jsonsafe import storable_text
from models.outcome import OUTCOME, Fail, Outcome
from parkway.crypto import unseal
from parkway.db import single_statement, transaction
from parkway.errors import InvalidOutcome
from parkway.netguard import Exposed
from parkway.settings import get_settings
from tasks.celery_app import PUSH_STEP, app
from tasks.projection import project_soon
from tasks.publish import publish
from tasks.remote import Item, digest, give_back, item_of
from tasks.serving import sent_outcome
from tasks.webhook_http import PHASES, Connections, Sent, client, post
from tasks.worker import give_up, hand_on, refusal, unclaimed

log = logging.getLogger("parkway.push")

GONE = "this version is gone"  # the reason of a step whose push handler answered 410
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
    """POST one continuation to the push handler that serves it; commit what it answers (exactly once)."""
    return push(continuation_id)


def push(continuation_id: str) -> str:
    """Claim, POST, commit or retry; returns what happened (for logs and tests)."""
    settings = get_settings()
    lease_id = f"{continuation_id}.{secrets.token_hex(8)}"  # shaped as a lease id; held by no principal
    lease_s = settings.webhook_timeout_s * PHASES
    extra: dict[str, Any] = {"continuation_id": continuation_id, "execution_id": lease_id}
    with single_statement(durable=False) as conn:
        claim = store.claim_in_one_statement(conn, continuation_id, execution_id=lease_id, lease_s=lease_s,
                                             max_attempts=settings.max_attempts)  # fmt: skip
    if claim is None:
        return unclaimed(continuation_id, settings.max_attempts, extra)
    extra.update(run_id=claim.run_id, step_id=claim.step.id)
    reason = refusal(claim)
    if reason is not None:
        return give_up(claim, reason, lease_id, extra)
    row = claim.continuation
    with single_statement() as conn:
        target = store.handler_serving(conn, row.name)
    if target is None:  # removed since: whoever serves it now gets it
        return hand_on(claim, lease_id, extra, handed_on=True)
    try:
        sent = _post(claim, target, lease_id, lease_s)
    except Exposed as exc:  # nothing sent, and no retry would send it: the system's verdict, as after a 410
        log.warning("push handler %s: %s; not sent", target.id, exc, extra={**extra, "action": "push"})
        why = f"{EXPOSED}: push handler {target.id} is plain http outside PARKWAY_WEBHOOK_ALLOWED_NETWORKS"
        return _commit(claim, lease_id, store.Interruption(why), extra)
    outcome, good = answered(sent, target.id, row.name)
    with single_statement() as conn:
        store.count_push(conn, target.id, failed=not good)
    if outcome is None:
        return _retry(lease_id, _failure(sent, target.id), extra)
    return _commit(claim, lease_id, outcome, extra)


def _post(claim: store.Claim, target: store.Target, lease_id: str, lease_s: float) -> Sent:
    """POST the claimed continuation's item to its handler, signed; ``Exposed`` (nothing sent) when it holds
    sensitive values that the handler's URL may not receive (``webhook_http.post``, ``confidential``)."""
    sensitive = any(answer.sealed is not None for answer in claim.answers.values())  # item_of unseals them
    item = item_of(claim, lease_id, utcnow() + timedelta(seconds=lease_s))
    return post(_http(), target.url, secrets=[unseal(target.secret_sealed)],
                msg_id=message_id(claim.continuation.id), body=_ITEM.dump_json(item), max_bytes=MAX_ANSWER_BYTES,
                agent="parkway-push", confidential=sensitive)  # fmt: skip


def answered(sent: Sent, handler_id: str, key: str) -> tuple[Outcome | store.Interruption | None, bool]:
    """What the handler's answer means, and whether it was a committable outcome: its outcome, the step
    interrupted (410), the run failed (an answer that is no committable outcome), or ``None``: no answer to
    act on (retried)."""
    if sent.status_code == 410:
        return store.Interruption(f"{GONE}: push handler {handler_id} answered 410 for {key}"), False
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


def _retry(lease_id: str, why: str, extra: dict[str, Any]) -> str:
    """claimed -> ready, the attempt counted (due again when the sweep publishes it); out of attempts, the
    run interrupted with ``why`` as after a crash loop (``give_back``)."""
    log.warning("%s; retried", why, extra={**extra, "action": "push"})
    return "retry" if give_back(lease_id, why) else "lost"


def _commit(claim: store.Claim, lease_id: str, outcome: Outcome | store.Interruption, extra: dict[str, Any]) -> str:
    completion = None
    if not isinstance(outcome, store.Interruption):
        completion = store.Completion(lease_id, digest(outcome))
    with transaction() as session:  # the answers are read again: the claim's were unsealed for the item
        claim = store.load_claim(session, claim.continuation)
    committed = store.commit_outcome(claim, outcome, execution_id=lease_id, completion=completion)
    if committed is None:
        log.info("claim lost before commit; another execution owns it", extra={**extra, "action": "consume"})
        return "lost"
    # Remote ones are leased, not published; the sweep relays a lost publish.
    publish([c for c in committed.due if not c.remote], retry=False)
    if committed.ended is not None:
        project_soon(committed.ended)
    return "committed"
