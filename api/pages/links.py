"""An approval link's page (``/links/{token}``, docs/teams.md "Approval links"): one person, one wait.

``GET`` only shows: the prompt, the form of its schema or its choices, and a justification field. It never
writes, so a mail scanner or a chat unfurler that fetches it changes nothing. Deciding is a ``POST`` of that
form, with a CSRF token bound to the link and to a nonce cookie of the link pages (``parkway_link_nonce``),
answered through ``tasks.sdk.answer`` as the link's person, the link used in the answer's transaction: the
same receipts, 409 and 410 as the API. A browser signed in to the Decisions page as someone else may not
use it (403): the link is its person's alone.
"""

from __future__ import annotations

import hmac
import re
import secrets
from typing import Annotated, Any

from fastapi import Depends, Path, Request, Response

from api.errors import outcome_status
from api.input import checked_router
from api.pages import answering, forms
from api.pages.inbox import Notice
from api.pages.render import render
from api.pages.session import link_csrf_token, read_form, signed_in
from models import links
from models.links import Opened
from models.status import InteractionKind, InteractionStatus
from parkway.db import transaction
from parkway.errors import Forbidden, OutcomeError
from parkway.tokens import hash_token
from tasks import sdk

router = checked_router(prefix=links.PATH, include_in_schema=False)

TOKEN = r"^pl_[A-Za-z0-9_-]{20,100}$"
NONCE = "parkway_link_nonce"
CSRF = "csrf"
MAX_JUSTIFICATION = 2000
NEEDS_WHY = "This decision needs a justification: say why in a sentence."

TokenPath = Annotated[str, Path(pattern=TOKEN, description="the link's token")]
FormDep = Annotated[dict[str, str], Depends(read_form)]


@router.get("/{token}")
def show(request: Request, token: TokenPath) -> Response:
    """The prompt and its form, or why the link cannot decide (404, 403, 409, 410). Reads only."""
    opened, problem = _opened(request, token)
    return _page(request, token, opened, problem)


@router.post("/{token}")
def decide(request: Request, token: TokenPath, form: FormDep) -> Response:
    """Decide as the link's person: once, with the same outcomes as ``POST /v1/interactions/{id}/answer``."""
    opened, problem = _opened(request, token)
    if problem is None and not _csrf_ok(request, token, form):
        problem = Forbidden("this form has expired: open the link again")
    if problem is not None or opened is None:
        return _page(request, token, opened, problem)
    why = form.get("justification", "").replace("\x00", "").strip()[:MAX_JUSTIFICATION] or None
    if why is None and links.justify_asked(opened.interaction):
        return _page(request, token, opened, None, Notice(False, NEEDS_WHY), status_code=422)
    link_id, person = opened.link.id, opened.person.name
    notice, status_code = answering.answer_with(
        opened.view,
        form,
        lambda value: sdk.answer(
            opened.interaction.id,
            value,
            response_id=f"link-{link_id}",
            principal=person,
            link=link_id,
            justification=why,
        ),
    )
    if notice.ok:
        return _page(request, token, opened, None, notice, decided=True)
    return _page(request, token, opened, None, notice, status_code=status_code)


def _opened(request: Request, token: str) -> tuple[Opened | None, OutcomeError | None]:
    """The link as it is now, and why it cannot decide (``models.links.refusal``; also: the browser is
    signed in as someone else)."""
    with transaction() as session:
        opened = links.open_link(session, token)
    problem = links.refusal(opened)
    me = signed_in(request)
    if opened is not None and me is not None and me.id != opened.person.id:
        problem = Forbidden(f"this link is for {opened.person.name}, and this browser is signed in as {me.name}")
    return opened, problem


def _csrf_ok(request: Request, token: str, form: dict[str, str]) -> bool:
    nonce, sent = request.cookies.get(NONCE), form.get(CSRF, "")
    return bool(nonce and sent) and hmac.compare_digest(sent, link_csrf_token(str(nonce), hash_token(token)))


def _page(
    request: Request,
    token: str,
    opened: Opened | None,
    problem: OutcomeError | None,
    notice: Notice | None = None,
    *,
    status_code: int = 200,
    decided: bool = False,
) -> Response:
    """The link's page: its wait, and the form while the link may decide (a new nonce cookie with it)."""
    if problem is not None:
        notice, status_code = _refused(problem), outcome_status(problem)
    open_form = problem is None and not decided and opened is not None
    nonce = request.cookies.get(NONCE) or secrets.token_urlsafe(24)
    context: dict[str, Any] = {
        "opened": opened,
        "i": opened.interaction if opened is not None else None,
        "card": {"i": opened.interaction} if opened is not None else None,
        "notice": notice,
        "open_form": open_form,
        "action": f"{links.PATH}/{token}",
        "csrf": link_csrf_token(nonce, hash_token(token)),
        "field": _field(opened) if open_form and opened is not None else None,
        "justify": opened is not None and links.justify_asked(opened.interaction),
        "max_justification": MAX_JUSTIFICATION,
    }
    response = render(request, "link.html", context, status_code=status_code)
    if open_form and request.cookies.get(NONCE) != nonce:
        response.set_cookie(NONCE, nonce, path=f"{links.PATH}/", httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")  # fmt: skip
    return response


def _field(opened: Opened) -> forms.Field | None:
    """A question's form (its schema's fields); ``None`` for a permission (Approve and Reject)."""
    i = opened.interaction
    if i.kind == InteractionKind.PERMISSION:
        return None
    return forms.fields_for(i.schema, [str(s) for s in (i.sensitive or [])])


def _refused(problem: OutcomeError) -> Notice:
    """A refusal in the Decisions page's words where it names the wait's end, else in its own."""
    status = (problem.state or {}).get("status")
    if status is not None and status != InteractionStatus.PENDING:
        return answering.outcome_notice(problem, canceling=False)
    return Notice(False, re.sub(r"^interaction \S+ ", "this prompt ", problem.detail))
