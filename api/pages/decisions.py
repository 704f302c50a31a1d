"""The Decisions page (``/decisions``): a signed-in person answers or cancels what their runs ask.

Server-rendered with Jinja2 (autoescaped), no build step. Answers and cancels go through
``tasks.sdk.answer`` / ``tasks.sdk.cancel`` as the signed-in principal, like ``POST /v1/interactions/…``,
with a ``response_id`` made when the form was rendered: submitting one form twice is an exact retry and
gets the same receipt. 409, 410 and 422 outcomes are shown as sentences on the page.

Run status is live: the page opens ``/decisions/stream``, the same server-sent event stream as
``GET /v1/events/stream`` (same generator, same visibility) authenticated by the session cookie, since
``EventSource`` cannot send an ``Authorization`` header. The stream starts at the event cursor read
before the page's data, so nothing that happens after the page was read is missed.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import FileResponse, RedirectResponse, StreamingResponse
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.errors import ApiError, outcome_status
from api.metrics import ANSWERS
from api.pages import forms, texts
from api.pages.session import (
    CSRF_FIELD,
    PEOPLE,
    csrf_ok,
    csrf_token,
    end_session,
    ensure_nonce,
    forget_session,
    new_nonce,
    principal_for,
    read_form,
    session_id,
    session_principal,
    signed_in,
    start_session,
)
from api.pages.session import NONCE_COOKIE as NONCE
from api.pages.session import SESSION_COOKIE as SESSION
from api.routes.events import sse_events
from models import access
from models.access import InteractionView
from models.base import utcnow
from models.status import RUN_TERMINAL, InteractionKind, InteractionStatus, normalize_run_status
from models.tables import Principal, Run
from parkway.db import transaction
from parkway.errors import Conflict, Forbidden, Gone, InvalidAnswer, NotFound, OutcomeError
from tasks import sdk

router = APIRouter(prefix="/decisions", include_in_schema=False)

HERE = Path(__file__).resolve().parent
STATIC = {"decisions.css": "text/css", "live.js": "text/javascript", "favicon.svg": "image/svg+xml"}
PENDING_LIMIT = 50
RECENT_SCAN = 2000  # "recently" = among the last this many events (a primary-key range, bounded)
RECENT_LIMIT = 20
SESSION_RECHECK_S = 5.0  # how soon an open stream notices that its session has ended
ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}

FormDep = Annotated[dict[str, str], Depends(read_form)]


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else ""


def _until(value: datetime | None) -> str:
    if value is None:
        return ""
    seconds = int((value - utcnow()).total_seconds())
    if seconds <= 0:
        return "past its expiry"
    if seconds < 120:
        return f"in {seconds} s"
    if seconds < 7200:
        return f"in {seconds // 60} min"
    return f"in {seconds // 3600} h"


_env = Environment(
    loader=FileSystemLoader(HERE / "templates"), autoescape=True, undefined=StrictUndefined, trim_blocks=True
)
_env.filters["when"] = _when
_env.filters["until"] = _until
templates = Jinja2Templates(env=_env)


# --------------------------------------------------------------------------- what the page shows


@dataclass
class Notice:
    """The outcome of the last form post, shown above the lists."""

    ok: bool
    text: str
    details: list[str] = field(default_factory=list)
    run_id: str | None = None  # shown with its live status


@dataclass
class Card:
    """One interaction on the page, with its run and (when answerable) the form to answer it."""

    view: InteractionView
    run: Run | None
    run_status: str
    ended: str | None = None  # why it is not answerable, for the "no longer answerable" list
    form: forms.Field | None = None
    response_id: str = ""
    cancel_id: str = ""

    @property
    def i(self) -> Any:
        return self.view.interaction

    @property
    def decision(self) -> str:
        """How a closed interaction reads: a permission is approved or rejected, a question answered."""
        status = str(self.i.status)
        if self.i.kind == InteractionKind.PERMISSION and status == InteractionStatus.ANSWERED:
            return "approved"
        return status


def _status(run: Run | None) -> str:
    return normalize_run_status(run.status)[0].value if run is not None else "unknown"


def _card(view: InteractionView, runs: dict[str, Run]) -> Card:
    interaction = view.interaction
    run = runs.get(interaction.run_id)
    card = Card(view=view, run=run, run_status=_status(run))
    if interaction.status != InteractionStatus.PENDING:
        card.ended = interaction.status
    elif card.run_status in RUN_TERMINAL:
        card.ended = f"run {card.run_status}"
    elif interaction.expires_at is not None and interaction.expires_at <= utcnow():
        card.ended = "expired"
    else:
        if interaction.kind == InteractionKind.QUESTION:
            card.form = forms.fields_for(interaction.schema, [str(s) for s in (interaction.sensitive or [])])
        card.response_id, card.cancel_id = uuid.uuid4().hex, uuid.uuid4().hex
    return card


def _render(request: Request, name: str, context: dict[str, Any], status_code: int) -> Response:
    response = templates.TemplateResponse(request, name, context, status_code=status_code, headers=HEADERS)
    return response


def login_page(request: Request, *, message: str | None = None, status_code: int = 200) -> Response:
    nonce = request.cookies.get(NONCE) or new_nonce()
    response = _render(
        request, "login.html", {"csrf": csrf_token(nonce, None), "message": message}, status_code=status_code
    )
    ensure_nonce(response, request, nonce)
    if request.cookies.get(SESSION) is not None:  # a session that has ended
        forget_session(response)
    return response


def _pending(session: Session, principal: Principal, cursor: str | None) -> access.Page[InteractionView]:
    """The caller's pending interactions, oldest first (a cursor the API did not hand out starts over)."""

    def page(start: str | None) -> access.Page[InteractionView]:
        return access.list_interactions(
            session, principal, status="pending", target=None, run_id=None, cursor=start, limit=PENDING_LIMIT
        )

    try:
        return page(cursor)
    except access.InvalidCursor:
        return page(None)


def decisions_page(
    request: Request,
    principal: Principal,
    *,
    notice: Notice | None = None,
    status_code: int = 200,
    cursor: str | None = None,
) -> Response:
    with transaction() as session:
        after = access.stream_cursor(session)  # read first: the stream then misses nothing read after it
        page = _pending(session, principal, cursor)
        closed = access.recently_closed(session, principal, scan=RECENT_SCAN)
        run_ids = [v.interaction.run_id for v in [*page.items, *closed]]
        runs = access.runs_by_id(session, [*run_ids, *([notice.run_id] if notice and notice.run_id else [])])
    pending = [_card(view, runs) for view in page.items]
    decided = [
        _card(view, runs)
        for view in closed
        if view.interaction.status in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED)
    ]
    ended = [card for card in pending if card.ended] + [
        _card(view, runs)
        for view in closed
        if view.interaction.status not in (InteractionStatus.ANSWERED, InteractionStatus.REJECTED)
    ]
    notice_run = runs.get(notice.run_id) if notice and notice.run_id else None
    context = {
        "principal": principal,
        "csrf": csrf_token(request.cookies.get(NONCE, ""), session_id(request)),
        "csrf_field": CSRF_FIELD,
        "notice": notice,
        "notice_run": notice_run,
        "notice_run_status": _status(notice_run),
        "pending": [card for card in pending if not card.ended],
        "decided": decided[:RECENT_LIMIT],
        "ended": ended[:RECENT_LIMIT],
        "next_cursor": page.next,
        "stream_url": f"/decisions/stream?after={after}",
        "terminal": sorted(RUN_TERMINAL),
    }
    return _render(request, "decisions.html", context, status_code=status_code)


# --------------------------------------------------------------------------- routes


@router.get("")
def show(request: Request, cursor: Annotated[str | None, Query(max_length=500)] = None) -> Response:
    """The sign-in form, or the signed-in person's pending and recent prompts."""
    principal = signed_in(request)
    if principal is None:
        return login_page(request)
    if request.cookies.get(NONCE) is None:
        return login_page(request, message=texts.SESSION_ENDED)
    return decisions_page(request, principal, cursor=cursor)


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
    response = RedirectResponse("/decisions", status_code=303)
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
    return _post(request, interaction_id, form, _answer)


@router.post("/interactions/{interaction_id}/cancel")
def cancel(request: Request, interaction_id: str, form: FormDep) -> Response:
    """Cancel the parked step of this interaction (and so its run), as the signed-in person."""
    return _post(request, interaction_id, form, _cancel)


@router.get("/stream")
async def stream(
    request: Request,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
) -> Response:
    """``GET /v1/events/stream`` for the signed-in person, authenticated by the session cookie."""
    sid = session_id(request)
    principal = await run_in_threadpool(session_principal, sid)
    if principal is None or sid is None:
        return Response(status_code=401, headers={"Cache-Control": "no-store"})
    start = int(last_event_id) if last_event_id and last_event_id.isascii() and last_event_id.isdigit() else after
    return StreamingResponse(
        _while_open(sid, sse_events(request, principal, start)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _while_open(sid: str, chunks: AsyncIterator[str]) -> AsyncIterator[str]:
    """The stream's chunks while its session is open: the session is read again at a chunk (an event or
    the keep-alive) at most every ``SESSION_RECHECK_S``, and the stream ends once the session has ended
    (signed out, token rotated, principal disabled)."""
    checked = time.monotonic()
    try:
        async for chunk in chunks:
            if time.monotonic() - checked >= SESSION_RECHECK_S:
                if await run_in_threadpool(session_principal, sid) is None:
                    return
                checked = time.monotonic()
            yield chunk
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()


@router.get("/static/{name}")
def static(name: str) -> Response:
    media_type = STATIC.get(name)
    if media_type is None:
        raise ApiError(404, "no such resource")
    return FileResponse(HERE / "static" / name, media_type=media_type, headers={"Cache-Control": "no-cache"})


# --------------------------------------------------------------------------- answering and canceling


def _post(request: Request, interaction_id: str, form: dict[str, str], act: Any) -> Response:
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


def _answer(principal: Principal, view: InteractionView, response_id: str, form: dict[str, str]) -> tuple[Notice, int]:
    interaction = view.interaction
    prompt = interaction.prompt or interaction.key
    try:
        if interaction.kind == InteractionKind.PERMISSION:
            decision = form.get("decision")
            if decision not in ("approve", "reject"):
                raise forms.FormError("choose Approve or Reject")
            value: Any = {"approved": decision == "approve"}
        else:
            sensitive = [str(s) for s in (interaction.sensitive or [])]
            value = forms.value_from(forms.fields_for(interaction.schema, sensitive), form)
        receipt = sdk.answer(interaction.id, value, response_id=response_id, principal=principal.name)
    except forms.FormError as exc:
        ANSWERS.labels(outcome="invalid_answer").inc()
        return Notice(False, texts.INVALID, [str(exc)]), 422
    except OutcomeError as exc:
        ANSWERS.labels(outcome=exc.code).inc()
        if isinstance(exc, InvalidAnswer):
            exc.errors = _redacted(exc.errors, value, [str(s) for s in (interaction.sensitive or [])])
        return _outcome(exc, canceling=False), outcome_status(exc)
    ANSWERS.labels(outcome=receipt["status"]).inc()
    if interaction.kind == InteractionKind.PERMISSION:
        text = (texts.APPROVED if receipt["status"] == InteractionStatus.ANSWERED else texts.REJECTED).format(
            prompt=prompt
        )
    else:
        text = texts.ANSWERED.format(prompt=prompt)
    return Notice(True, text, run_id=interaction.run_id), 200


def _redacted(messages: list[str], value: Any, sensitive: list[str]) -> list[str]:
    """Schema messages quote the value: a sensitive field's value is never put back on the page."""
    secrets = [str(value[k]) for k in sensitive if isinstance(value, dict) and value.get(k) not in (None, "")]
    redacted = []
    for message in messages:
        for secret in secrets:
            message = message.replace(repr(secret), "'***'").replace(secret, "***")
        redacted.append(message)
    return redacted


def _cancel(principal: Principal, view: InteractionView, response_id: str, form: dict[str, str]) -> tuple[Notice, int]:
    interaction = view.interaction
    reason = form.get("reason", "").replace("\x00", "").strip()[:2000] or None
    try:
        sdk.cancel(interaction.id, response_id=response_id, principal=principal.name, reason=reason)
    except OutcomeError as exc:
        return _outcome(exc, canceling=True), outcome_status(exc)
    return Notice(True, texts.CANCELED.format(run=interaction.run_id), run_id=interaction.run_id), 200


def _outcome(exc: OutcomeError, *, canceling: bool) -> Notice:
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
