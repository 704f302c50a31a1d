"""Interactions: list and read what the caller may see; answer and cancel through the SDK."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import Path, Query, Request, Response
from pydantic_core import to_json

from api import errors
from api.deps import (
    OPERATORS,
    CursorParam,
    LimitParam,
    PrincipalDep,
    SessionDep,
    TextFilter,
    TokenDep,
    bearer_token,
    in_thread,
    presented,
    refused,
    token_holder,
)
from api.errors import ApiError, documented
from api.input import checked_router, is_plain_json, served_plainly
from api.metrics import ANSWERS
from api.schemas import (
    ID,
    AnswerIn,
    AnswerReceiptOut,
    CancelIn,
    CancelReceiptOut,
    DelegateIn,
    DelegationReceiptOut,
    InteractionOut,
    InteractionPage,
)
from models import access
from models.store import ANSWERERS
from parkway import tracing
from parkway.db import transaction
from parkway.errors import Conflict, Gone, OutcomeError, Unauthenticated, WrongKind
from tasks import sdk

router = checked_router(prefix="/v1/interactions", tags=["interactions"])

InteractionId = Annotated[str, Path(pattern=ID, description="the interaction's id")]
StatusFilter = Literal["pending", "answered", "rejected", "canceled", "expired", "interrupted"]


@router.get(
    "",
    response_model=InteractionPage,
    operation_id="list_interactions",
    summary="Interactions the caller may see (granted targets; own runs for agents; all for admins)",
    responses=documented(401, 422),
)
def list_interactions(
    principal: PrincipalDep,
    session: SessionDep,
    status: StatusFilter | None = None,
    target: TextFilter = None,
    run_id: Annotated[str | None, Query(pattern=ID)] = None,
    cursor: CursorParam = None,
    limit: LimitParam = 50,
) -> InteractionPage:
    page = access.list_interactions(
        session, principal, status=status, target=target, run_id=run_id, cursor=cursor, limit=limit
    )
    return InteractionPage(items=[InteractionOut.of(v) for v in page.items], next=page.next)


@router.get(
    "/{interaction_id}",
    response_model=InteractionOut,
    operation_id="get_interaction",
    summary="Prompt, schema, status, expiry and who answered; never a sensitive value",
    responses=documented(401, 403, 404, 422),
)
def read_interaction(interaction_id: InteractionId, principal: PrincipalDep, session: SessionDep) -> InteractionOut:
    view = access.interaction_view(session, interaction_id)
    if view is None:
        raise ApiError(404, errors.INTERACTION_NOT_FOUND.format(id=interaction_id))
    if not access.can_see_interaction(session, principal, interaction_id):
        raise ApiError(403, errors.INTERACTION_FORBIDDEN.format(name=principal.name, id=interaction_id))
    return InteractionOut.of(view)


_ID = re.compile(ID)


async def _answer_plainly(request: Request) -> Response | None:
    """``answer`` for a request whose id, JSON body and credentials it can read at once: no dependency solved,
    and the receipt the store built (``AnswerReceiptOut``'s fields, in its order) rendered by pydantic's
    encoder as the response model would render it, without validating it again (tests/api/test_answer_plainly
    compares the bytes). ``None`` for any other request: FastAPI's route reads it, and refuses it in the
    error shape (422)."""
    interaction_id = request.path_params["interaction_id"]
    if not _ID.fullmatch(interaction_id) or not is_plain_json(request):
        return None
    try:
        body = AnswerIn.model_validate(await request.json())  # the JSON parse ``checked_input`` kept
    except Exception:  # not JSON (a parse error, nested past the parser's depth), or not an answer
        return None  # FastAPI's route reads it again and refuses it its own way
    receipt = await in_thread(_answer, interaction_id, body, bearer_token(request))
    return Response(to_json(receipt), media_type="application/json")


@router.post(
    "/{interaction_id}/answer",
    response_model=AnswerReceiptOut,
    operation_id="answer_interaction",
    summary="Answer: the first response wins; an exact retry gets the same receipt",
    responses=documented(401, 403, 404, 409, 410, 413, 422, models=errors.INTERACTION_OUTCOMES),
)
@served_plainly(_answer_plainly)
async def answer(interaction_id: InteractionId, body: AnswerIn, credentials: TokenDep) -> dict[str, Any]:
    # The hot path: one hop off the event loop, and the caller read by its token in the answer's first
    # statement (a human or an admin; a bad token is a 401 and an agent a 403, before anything about the
    # interaction is told): no round trip of its own. A request ``_answer_plainly`` can read never gets here.
    return await in_thread(_answer, interaction_id, body, presented(credentials))


def _answer(interaction_id: str, body: AnswerIn, token: str | None) -> dict[str, Any]:
    holder = token_holder(token, ANSWERERS)
    with tracing.span("parkway.answer", interaction_id=interaction_id, response_id=body.response_id):
        try:
            receipt = sdk.answer(interaction_id, body.value, response_id=body.response_id, principal=holder)
        except (Unauthenticated, WrongKind) as exc:
            if isinstance(exc, WrongKind) and exc.kind in OPERATORS:
                ANSWERS.labels(outcome="forbidden").inc()  # an answer refused (403) like any other
            raise refused(exc) from None
        except OutcomeError as exc:
            ANSWERS.labels(outcome=exc.code).inc()
            tracing.annotate(outcome=exc.code)  # conflict: another response won (409)
            raise _authoritative(exc) from None
        ANSWERS.labels(outcome=receipt["status"]).inc()
        tracing.annotate(outcome=receipt["status"])
        return receipt


@router.post(
    "/{interaction_id}/cancel",
    response_model=CancelReceiptOut,
    operation_id="cancel_interaction",
    summary="Cancel the parked step: its pending interactions, the step and the run become canceled",
    responses=documented(401, 403, 404, 409, 410, 413, 422, models=errors.INTERACTION_OUTCOMES),
)
def cancel(interaction_id: InteractionId, body: CancelIn, principal: PrincipalDep) -> dict[str, Any]:
    try:
        return sdk.cancel(interaction_id, response_id=body.response_id, principal=principal, reason=body.reason)
    except OutcomeError as exc:
        raise _authoritative(exc) from None


@router.post(
    "/{interaction_id}/delegate",
    response_model=DelegationReceiptOut,
    operation_id="delegate_interaction",
    summary="Move the caller's place on a pending wait to another person: they answer in it, the caller no more",
    responses=documented(401, 403, 404, 409, 410, 413, 422, models=errors.INTERACTION_OUTCOMES),
)
def delegate(interaction_id: InteractionId, body: DelegateIn, principal: PrincipalDep) -> dict[str, Any]:
    try:
        return sdk.delegate(interaction_id, body.to, principal=principal, note=body.note)
    except OutcomeError as exc:
        raise _authoritative(exc) from None


def _authoritative(exc: OutcomeError) -> OutcomeError:
    """409/410 carry the whole interaction as it is now (values redacted as on reads) and ``run_status``."""
    if not isinstance(exc, Conflict | Gone) or not exc.state or "id" not in exc.state:
        return exc
    with transaction() as session:
        view = access.interaction_view(session, str(exc.state["id"]))
        if view is None:
            return exc
        state = InteractionOut.of(view).model_dump(mode="json", by_alias=True)
        state["run_status"] = access.run_status_of(session, view.interaction.run_id)
    if isinstance(exc, Conflict):  # the refused answer's span (when traced) names the response that won
        tracing.annotate(won_by=view.answered_by, won_response_id=view.interaction.response_id)
    # The store's verdict on the status stands: a wait past its deadline is expired by the database's
    # clock before the sweep has recorded it (the row still says pending).
    state["status"] = exc.state.get("status", state["status"])
    exc.state = state
    return exc
