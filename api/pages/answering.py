"""Answering and canceling from the Decisions page, as the signed-in person.

Answers and cancels go through ``tasks.sdk.answer`` / ``tasks.sdk.cancel`` as the signed-in principal, like
``POST /v1/interactions/…``, with a ``response_id`` made when the form was rendered: submitting one form
twice is an exact retry and gets the same receipt. 409, 410 and 422 outcomes are shown as sentences.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastapi import Request, Response

from api.errors import outcome_status
from api.metrics import ANSWERS
from api.pages import forms, texts
from api.pages.inbox import Notice, decisions_page
from api.pages.render import login_page
from api.pages.session import csrf_ok, session_id, signed_in
from models import access, history
from models.access import InteractionView
from models.status import InteractionKind, InteractionStatus
from models.tables import Principal
from parkway.db import transaction
from parkway.errors import Conflict, Forbidden, Gone, InvalidAnswer, NotFound, OutcomeError
from tasks import sdk

ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def post(request: Request, interaction_id: str, form: dict[str, str], act: Any) -> Response:
    principal = signed_in(request)
    if principal is None:
        return login_page(request, message=texts.SESSION_ENDED, status_code=401)
    if not csrf_ok(request, form, session_id(request)):
        return decisions_page(request, principal, notice=Notice(False, texts.FORM_EXPIRED), status_code=403)
    response_id = form.get("response_id", "")
    if not ID.match(interaction_id) or not ID.match(response_id):
        return decisions_page(request, principal, notice=Notice(False, texts.BAD_ID), status_code=404)
    with transaction() as session:
        view = access.interaction_view(session, interaction_id)
        visible = view is not None and access.can_see_interaction(session, principal, interaction_id)
    if view is None:
        return decisions_page(request, principal, notice=Notice(False, texts.NOT_FOUND), status_code=404)
    if not visible:
        return decisions_page(request, principal, notice=Notice(False, texts.FORBIDDEN), status_code=403)
    notice, status_code = act(principal, view, response_id, form)
    return decisions_page(request, principal, notice=notice, status_code=status_code)


def cancel_run(request: Request, run_id: str, form: dict[str, str]) -> Response:
    """ "Cancel run" on a run's card: cancel through a pending prompt of the run as it is now."""
    principal = signed_in(request)
    if principal is None:
        return login_page(request, message=texts.SESSION_ENDED, status_code=401)
    with transaction() as session:
        interaction_id = history.cancel_via(session, principal, run_id)
    if interaction_id is None:
        return decisions_page(request, principal, notice=Notice(False, texts.NO_RUN_PROMPT), status_code=404)
    return post(request, interaction_id, form, cancel)


def answer(principal: Principal, view: InteractionView, response_id: str, form: dict[str, str]) -> tuple[Notice, int]:
    return answer_with(view, form, lambda value: sdk.answer(view.interaction.id, value, response_id=response_id,
                                                            principal=principal.name))  # fmt: skip


def answer_with(
    view: InteractionView, form: dict[str, str], send: Callable[[Any], dict[str, Any]]
) -> tuple[Notice, int]:
    """The answer the form gives (a permission's ``decision=approve|reject``, or a question's fields), sent by
    ``send`` (``tasks.sdk.answer`` as someone); what to show of it, and the status."""
    interaction = view.interaction
    prompt = interaction.prompt or interaction.key
    value: Any = None
    try:
        if interaction.kind == InteractionKind.PERMISSION:
            decision = form.get("decision")
            if decision not in ("approve", "reject"):
                raise forms.FormError("choose Approve or Reject")
            value = {"approved": decision == "approve"}
        else:
            sensitive = [str(s) for s in (interaction.sensitive or [])]
            value = forms.value_from(forms.fields_for(interaction.schema, sensitive), form)
        receipt = send(value)
    except forms.FormError as exc:
        ANSWERS.labels(outcome="invalid_answer").inc()
        return Notice(False, texts.INVALID, [str(exc)]), 422
    except OutcomeError as exc:
        ANSWERS.labels(outcome=exc.code).inc()
        if isinstance(exc, InvalidAnswer):
            exc.errors = _redacted(exc.errors, value, [str(s) for s in (interaction.sensitive or [])])
        return outcome_notice(exc, canceling=False), outcome_status(exc)
    ANSWERS.labels(outcome=receipt["status"]).inc()
    if receipt["status"] == InteractionStatus.PENDING:  # one response towards a quorum (docs/teams.md)
        text = texts.RECORDED.format(prompt=prompt, quorum=interaction.quorum)
    elif interaction.kind == InteractionKind.PERMISSION:
        text = (texts.APPROVED if receipt["status"] == InteractionStatus.ANSWERED else texts.REJECTED).format(
            prompt=prompt
        )
    else:
        text = texts.ANSWERED.format(prompt=prompt)
    return Notice(True, text, run_id=interaction.run_id, receipt=receipt), 200


def _redacted(messages: list[str], value: Any, sensitive: list[str]) -> list[str]:
    """Schema messages quote the value: a sensitive field's value is never put back on the page."""
    secrets = [str(value[k]) for k in sensitive if isinstance(value, dict) and value.get(k) not in (None, "")]
    redacted = []
    for message in messages:
        for secret in secrets:
            message = message.replace(repr(secret), "'***'").replace(secret, "***")
        redacted.append(message)
    return redacted


def delegate(principal: Principal, view: InteractionView, response_id: str, form: dict[str, str]) -> tuple[Notice, int]:
    """ "Delegate" on a prompt: hand it to the person named in the form too (docs/teams.md)."""
    interaction = view.interaction
    to = form.get("to", "").strip()
    note = form.get("note", "").replace("\x00", "").strip()[:2000] or None
    try:
        made = sdk.delegate(interaction.id, to, principal=principal.name, note=note)
    except OutcomeError as exc:
        return outcome_notice(exc, canceling=False), outcome_status(exc)
    prompt = interaction.prompt or interaction.key
    return Notice(True, texts.DELEGATED.format(prompt=prompt, to=made["to"]), run_id=interaction.run_id), 200


def cancel(principal: Principal, view: InteractionView, response_id: str, form: dict[str, str]) -> tuple[Notice, int]:
    interaction = view.interaction
    reason = form.get("reason", "").replace("\x00", "").strip()[:2000] or None
    try:
        sdk.cancel(interaction.id, response_id=response_id, principal=principal.name, reason=reason)
    except OutcomeError as exc:
        return outcome_notice(exc, canceling=True), outcome_status(exc)
    return Notice(True, texts.CANCELED.format(run=interaction.run_id), run_id=interaction.run_id), 200


def outcome_notice(exc: OutcomeError, *, canceling: bool) -> Notice:
    """A sentence for each refusal, from the authoritative state the SDK raised with."""
    state = exc.state or {}
    run_id = state.get("run_id") if isinstance(state.get("run_id"), str) else None
    if isinstance(exc, Conflict):
        by = f" by {state['answered_by']}" if state.get("answered_by") else ""
        text = (texts.CONFLICT_CANCEL if canceling else texts.CONFLICT).format(status=state.get("status"), by=by)
        return Notice(False, text, run_id=run_id)
    if isinstance(exc, Gone):
        status = state.get("status")
        why = texts.GONE_WHY.get(str(status)) or texts.GONE_RUN.format(run_status=state.get("run_status"))
        return Notice(False, texts.GONE.format(why=why), run_id=run_id)
    if isinstance(exc, InvalidAnswer):
        return Notice(False, texts.INVALID, [e.removeprefix("(value): ") for e in exc.errors] or [exc.detail])
    if isinstance(exc, Forbidden):
        return Notice(False, texts.FORBIDDEN)
    if isinstance(exc, NotFound):
        return Notice(False, texts.NOT_FOUND)
    return Notice(False, exc.detail)
