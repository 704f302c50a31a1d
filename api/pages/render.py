"""What every page shares: the Jinja2 environment (autoescaped), its filters, the security headers, the
static files and the sign-in page."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import Request, Response
from fastapi.responses import FileResponse
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from api.errors import ApiError
from api.pages.session import NONCE_COOKIE as NONCE
from api.pages.session import SESSION_COOKIE as SESSION
from api.pages.session import csrf_token, ensure_nonce, forget_session, new_nonce
from models.base import utcnow
from models.status import normalize_run_status
from models.tables import Run
from parkway.settings import get_settings

HERE = Path(__file__).resolve().parent
STATIC = {
    "decisions.css": "text/css",
    "live.js": "text/javascript",
    "history.js": "text/javascript",
    "stream.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}
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
JSON_SHOWN = 4000  # characters of a JSON value shown before it is cut


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else ""


def clock(value: datetime | None) -> str:
    """The time of day with milliseconds: a timeline's events are often within one second."""
    return value.strftime("%H:%M:%S.%f")[:-3] if value is not None else ""


def until(value: datetime | None) -> str:
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


def as_json(value: Any) -> str:
    """A JSON value, indented, cut at ``JSON_SHOWN`` characters (rendered escaped, in a ``<pre>``)."""
    shown = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return shown if len(shown) <= JSON_SHOWN else shown[:JSON_SHOWN] + "\n… (cut)"


def run_status(run: Run | None) -> str:
    return normalize_run_status(run.status)[0].value if run is not None else "unknown"


_env = Environment(
    loader=FileSystemLoader(HERE / "templates"), autoescape=True, undefined=StrictUndefined, trim_blocks=True
)


def trace_url(trace_id: str) -> str:
    """Where ``PARKWAY_TRACE_URL`` shows a trace (empty: nowhere; the page shows its id alone)."""
    template = get_settings().trace_url
    return template.replace("{trace_id}", trace_id) if template else ""


_env.filters.update(when=when, until=until, clock=clock, as_json=as_json, trace_url=trace_url)
templates = Jinja2Templates(env=_env)


def render(request: Request, name: str, context: dict[str, Any], status_code: int = 200) -> Response:
    return templates.TemplateResponse(request, name, context, status_code=status_code, headers=HEADERS)


def login_page(
    request: Request, *, message: str | None = None, status_code: int = 200, next_path: str = ""
) -> Response:
    """The sign-in form; ``next_path`` is where signing in leads (the Decisions page when empty)."""
    nonce = request.cookies.get(NONCE) or new_nonce()
    context = {"csrf": csrf_token(nonce, None), "message": message, "next": next_path}
    response = render(request, "login.html", context, status_code=status_code)
    ensure_nonce(response, request, nonce)
    if request.cookies.get(SESSION) is not None:  # a session that has ended
        forget_session(response)
    return response


def static_file(name: str) -> Response:
    media_type = STATIC.get(name)
    if media_type is None:
        raise ApiError(404, "no such resource")
    return FileResponse(HERE / "static" / name, media_type=media_type, headers={"Cache-Control": "no-cache"})
