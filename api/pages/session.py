"""Signing in to the Decisions page: a server-side session, and CSRF tokens for its forms.

Signing in with a token makes a session (``models.principals``): a random id, stored only as its SHA-256
and bound to the principal and its token generation. The session cookie holds that id, never the bearer
token (HttpOnly, SameSite=Strict, path ``/`` so ``/runs`` shares it, Secure over HTTPS); nor is it a bearer
token. The session is read on every request, so it ends at once, in every API process, when the person signs out,
when it expires (``SESSION_TTL``), when the principal's token is rotated or when the principal is disabled;
grants are read anew each time. A second cookie holds a random nonce, made on the first visit and again at
each sign-in. Every form carries ``HMAC(key, nonce | session id hash)``: a form from before a sign-in, or
from another browser, does not verify. The nonce exists before sign-in too, so the sign-in form itself
cannot be posted from another site (login CSRF).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import parse_qsl

from fastapi import Request, Response
from sqlalchemy.orm import Session

from models import access, principals
from models.status import PrincipalKind
from models.tables import Principal
from parkway.db import read_statement, transaction
from parkway.settings import get_settings
from parkway.tokens import hash_token

PATH = "/"  # the Decisions page and the run history (/runs) share one session
SESSION_COOKIE = "parkway_session"
NONCE_COOKIE = "parkway_nonce"
CSRF_FIELD = "csrf"
PEOPLE = frozenset({PrincipalKind.HUMAN, PrincipalKind.ADMIN})
MAX_TOKEN = 512


def _key() -> bytes:
    """A key of its own for CSRF tokens, derived from PARKWAY_SECRET_KEY (never the key itself)."""
    secret = get_settings().resolved_secret_key().encode()
    return hmac.new(secret, b"parkway decisions csrf", hashlib.sha256).digest()


def csrf_token(nonce: str, session_id: str | None) -> str:
    """The CSRF token of a page: bound to the browser's nonce and to its session (if signed in)."""
    bound = principals.session_hash(session_id) if session_id else "-"
    return hmac.new(_key(), f"{nonce}|{bound}".encode(), hashlib.sha256).hexdigest()


def link_csrf_token(nonce: str, link_hash: str) -> str:
    """The CSRF token of an approval link's page: bound to the browser's link nonce and to the link."""
    return hmac.new(_key(), f"{nonce}|link:{link_hash}".encode(), hashlib.sha256).hexdigest()


def csrf_ok(request: Request, form: dict[str, str], session_id: str | None) -> bool:
    """Whether the form carries this browser's CSRF token for ``session_id`` (``None`` before sign-in)."""
    nonce = request.cookies.get(NONCE_COOKIE)
    sent = form.get(CSRF_FIELD, "")
    if not nonce or not sent:
        return False
    return hmac.compare_digest(sent, csrf_token(nonce, session_id))


def session_id(request: Request) -> str | None:
    """The session id the browser's cookie holds (not checked yet)."""
    value = request.cookies.get(SESSION_COOKIE, "").strip()
    return value if 0 < len(value) <= MAX_TOKEN else None


def principal_for(token: str | None) -> Principal | None:
    """The principal holding this token, read now (one read of its own), or ``None``."""
    if not token or len(token) > MAX_TOKEN:
        return None
    with read_statement() as conn:
        return access.principal_by_token(conn, hash_token(token))


def session_principal(sid: str | None) -> Principal | None:
    """The person (human or admin) of an open session, read now (one read of its own), or ``None``."""
    if not sid:
        return None
    with transaction() as session:
        return session_person(session, sid)


def session_person(session: Session, sid: str) -> Principal | None:
    """``session_principal`` read in ``session``."""
    principal = principals.page_session_principal(session, sid)
    return principal if principal is not None and principal.kind in PEOPLE else None


def signed_in(request: Request) -> Principal | None:
    """Who this browser is signed in as: the person of the open session its cookie names."""
    return session_principal(session_id(request))


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def _set(response: Response, request: Request, name: str, value: str) -> None:
    response.set_cookie(
        name,
        value,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def start_session(response: Response, request: Request, token: str) -> bool:
    """Sign in: a new session for the principal holding ``token``, its id in the cookie, and a fresh
    nonce, so every earlier form stops verifying. ``False`` (nothing set) when no live principal holds
    the token any more."""
    sid = "ps_" + secrets.token_urlsafe(32)
    with transaction() as session:
        if principals.start_page_session(session, token_hash=hash_token(token), session_id=sid) is None:
            return False
    _set(response, request, SESSION_COOKIE, sid)
    _set(response, request, NONCE_COOKIE, new_nonce())
    return True


def ensure_nonce(response: Response, request: Request, nonce: str) -> None:
    if request.cookies.get(NONCE_COOKIE) != nonce:
        _set(response, request, NONCE_COOKIE, nonce)


def forget_session(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path=PATH, httponly=True, samesite="strict")


def end_session(response: Response, request: Request) -> None:
    """Sign out: the session ended, its cookie cleared and the nonce renewed, so the old forms stop
    verifying."""
    sid = session_id(request)
    if sid:
        with transaction() as session:
            principals.end_page_session(session, sid)
    forget_session(response)
    _set(response, request, NONCE_COOKIE, new_nonce())


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (what the page's forms send) as a dict.

    The API's body limit (1 MiB) applies before this reads anything. Anything else reads as empty, and
    then fails the CSRF check.
    """
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return {}
    body = await request.body()
    try:
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=500))
    except (UnicodeDecodeError, ValueError):
        return {}
