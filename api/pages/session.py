"""Signing in to the Decisions page: a cookie holding the bearer token, and CSRF tokens for its forms.

The session cookie holds the token itself (HttpOnly, SameSite=Strict, path ``/decisions``, Secure over
HTTPS); the principal is looked up by the token's hash on every request, so a deleted principal is signed
out at once and grants are read anew each time. A second cookie holds a random nonce, made on the first
visit and again at each sign-in. Every form carries ``HMAC(key, nonce | token hash)``: a form from before
a sign-in, or from another browser, does not verify. The nonce exists before sign-in too, so the sign-in
form itself cannot be posted from another site (login CSRF).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import parse_qsl

from fastapi import Request, Response

from models import access
from models.status import PrincipalKind
from models.tables import Principal
from parkway.cli import hash_token
from parkway.db import read_statement
from parkway.settings import get_settings

PATH = "/decisions"
SESSION_COOKIE = "parkway_session"
NONCE_COOKIE = "parkway_nonce"
CSRF_FIELD = "csrf"
PEOPLE = frozenset({PrincipalKind.HUMAN, PrincipalKind.ADMIN})
MAX_TOKEN = 512


def _key() -> bytes:
    """A key of its own for CSRF tokens, derived from PARKWAY_SECRET_KEY (never the key itself)."""
    secret = get_settings().resolved_secret_key().encode()
    return hmac.new(secret, b"parkway decisions csrf", hashlib.sha256).digest()


def csrf_token(nonce: str, token: str | None) -> str:
    """The CSRF token of a page: bound to the browser's nonce and to the signed-in token (if any)."""
    bound = hash_token(token) if token else "-"
    return hmac.new(_key(), f"{nonce}|{bound}".encode(), hashlib.sha256).hexdigest()


def csrf_ok(request: Request, form: dict[str, str], token: str | None) -> bool:
    """Whether the form carries this browser's CSRF token for ``token`` (``None`` before sign-in)."""
    nonce = request.cookies.get(NONCE_COOKIE)
    sent = form.get(CSRF_FIELD, "")
    if not nonce or not sent:
        return False
    return hmac.compare_digest(sent, csrf_token(nonce, token))


def session_token(request: Request) -> str | None:
    token = request.cookies.get(SESSION_COOKIE, "").strip()
    return token if 0 < len(token) <= MAX_TOKEN else None


def principal_for(token: str | None) -> Principal | None:
    """The principal holding this token, read now (one read of its own), or ``None``."""
    if not token or len(token) > MAX_TOKEN:
        return None
    with read_statement() as conn:
        return access.principal_by_token(conn, hash_token(token))


def signed_in(request: Request) -> Principal | None:
    """Who this browser is signed in as: a person (human or admin) holding the session cookie's token."""
    principal = principal_for(session_token(request))
    return principal if principal is not None and principal.kind in PEOPLE else None


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


def start_session(response: Response, request: Request, token: str) -> None:
    """Sign in: the token in its cookie and a fresh nonce, so every earlier form stops verifying."""
    _set(response, request, SESSION_COOKIE, token)
    _set(response, request, NONCE_COOKIE, new_nonce())


def ensure_nonce(response: Response, request: Request, nonce: str) -> None:
    if request.cookies.get(NONCE_COOKIE) != nonce:
        _set(response, request, NONCE_COOKIE, nonce)


def forget_token(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path=PATH, httponly=True, samesite="strict")


def end_session(response: Response, request: Request) -> None:
    """Sign out: the token's cookie is cleared and the nonce renewed, so the old forms stop verifying."""
    forget_token(response)
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
