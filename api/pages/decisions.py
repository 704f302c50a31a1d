"""The Decisions page (``/decisions``): a signed-in person's live inbox of what their runs ask.

Server-rendered with Jinja2 (autoescaped), no build step: what it shows is ``api.pages.inbox``, answering
and canceling ``api.pages.answering``. The page is live: it opens ``/decisions/stream``, the same server-sent
event stream as ``GET /v1/events/stream`` (same generator, same visibility) authenticated by the session
cookie, since ``EventSource`` cannot send an ``Authorization`` header. A prompt asked after the page was
read is fetched as its run's card (``/decisions/runs/{id}/card``); one that closes leaves the list.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Depends, Header, Path, Query, Request, Response
from fastapi.responses import RedirectResponse
from starlette.concurrency import run_in_threadpool

from api.input import checked_router
from api.pages import answering, texts
from api.pages.inbox import Notice, View, decisions_page, run_card
from api.pages.render import login_page, static_file
from api.pages.session import (
    NONCE_COOKIE,
    PEOPLE,
    csrf_ok,
    end_session,
    principal_for,
    read_form,
    session_id,
    session_person,
    session_principal,
    signed_in,
    start_session,
)
from api.routes.events import LAST_SEQ, event_stream, resume_from

router = checked_router(prefix="/decisions", include_in_schema=False)

RUN_ID = r"^[A-Za-z0-9_-]{1,64}$"
NEXT = r"^/(decisions|runs)(/[A-Za-z0-9_-]{1,64})?$"

FormDep = Annotated[dict[str, str], Depends(read_form)]
ViewQuery = Annotated[View, Query(description="mine: prompts for my grants; all: every prompt I may read")]


@router.get("")
def show(
    request: Request, cursor: Annotated[str | None, Query(max_length=500)] = None, view: ViewQuery = "mine"
) -> Response:
    """The sign-in form, or the signed-in person's pending and recent prompts."""
    principal = signed_in(request)
    if principal is None:
        return login_page(request)
    if request.cookies.get(NONCE_COOKIE) is None:
        return login_page(request, message=texts.SESSION_ENDED)
    return decisions_page(request, principal, cursor=cursor, view=view)


@router.get("/runs/{run_id}/card")
def card(request: Request, run_id: Annotated[str, Path(pattern=RUN_ID)], view: ViewQuery = "mine") -> Response:
    """One run's card of answerable prompts, for the live page to insert (401 once the session ended)."""
    principal = signed_in(request)
    if principal is None:
        return Response(status_code=401, headers={"Cache-Control": "no-store"})
    return run_card(request, principal, run_id, view)


@router.post("/login")
def login(request: Request, form: FormDep) -> Response:
    """Check the pasted token, then start a server-side session; the cookie holds its random id (HttpOnly,
    SameSite=Strict), never the token, and the token is never shown."""
    if not csrf_ok(request, form, None):
        return login_page(request, message=texts.FORM_EXPIRED, status_code=403)
    token = form.get("token", "").strip()
    principal = principal_for(token)
    if principal is None:
        return login_page(request, message=texts.BAD_TOKEN, status_code=401)
    if principal.kind not in PEOPLE:
        return login_page(
            request, message=texts.WRONG_KIND.format(name=principal.name, kind=principal.kind), status_code=403
        )
    target = form.get("next", "")
    response = RedirectResponse(target if re.fullmatch(NEXT, target) else "/decisions", status_code=303)
    if not start_session(response, request, token):  # rotated or disabled since it was read
        return login_page(request, message=texts.BAD_TOKEN, status_code=401)
    return response


@router.post("/logout")
def logout(request: Request, form: FormDep) -> Response:
    principal = signed_in(request)
    if principal is not None and not csrf_ok(request, form, session_id(request)):
        return decisions_page(request, principal, notice=Notice(False, texts.FORM_EXPIRED), status_code=403)
    response = RedirectResponse("/decisions", status_code=303)
    end_session(response, request)
    return response


@router.post("/interactions/{interaction_id}/answer")
def answer(request: Request, interaction_id: str, form: FormDep) -> Response:
    """Answer as the signed-in person; a permission's form posts ``decision=approve|reject``."""
    return answering.post(request, interaction_id, form, answering.answer)


@router.post("/interactions/{interaction_id}/delegate")
def delegate(request: Request, interaction_id: str, form: FormDep) -> Response:
    """Hand this prompt to another person too, as the signed-in person (docs/teams.md)."""
    return answering.post(request, interaction_id, form, answering.delegate)


@router.post("/interactions/{interaction_id}/cancel")
def cancel(request: Request, interaction_id: str, form: FormDep) -> Response:
    """Cancel the parked step of this interaction (and so its run), as the signed-in person."""
    return answering.post(request, interaction_id, form, answering.cancel)


@router.post("/runs/{run_id}/cancel")
def cancel_run(request: Request, run_id: Annotated[str, Path(pattern=RUN_ID)], form: FormDep) -> Response:
    """Cancel a run from its card, as the signed-in person (through a prompt of it still pending)."""
    return answering.cancel_run(request, run_id, form)


@router.get("/stream")
async def stream(
    request: Request,
    after: Annotated[int, Query(ge=0, le=LAST_SEQ)] = 0,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
) -> Response:
    """``GET /v1/events/stream`` for the signed-in person, authenticated by the session cookie on every
    poll: the stream ends once the session has (signed out, token rotated, principal disabled)."""
    sid = session_id(request)
    if sid is None or await run_in_threadpool(session_principal, sid) is None:
        return Response(status_code=401, headers={"Cache-Control": "no-store"})
    return event_stream(request, lambda session: session_person(session, sid), resume_from(last_event_id, after))


@router.get("/static/{name}")
def static(name: str) -> Response:
    return static_file(name)
