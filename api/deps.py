"""Dependencies: the caller (``PrincipalDep``, the kind-restricted aliases, or the bearer token not yet
read, ``TokenDep``), a read session, and the API's thread pool for blocking work. Authentication and the
kind checks happen here: the store is handed the principal they found."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api import errors
from api.errors import ApiError
from api.schemas import TEXT
from models import access
from models.status import PrincipalKind
from models.store.principals import TokenHolder
from models.tables import Principal
from parkway.db import read_statement, session_factory
from parkway.errors import Unauthenticated, WrongKind
from parkway.settings import get_settings
from parkway.tokens import hash_token

T = TypeVar("T")

OPERATORS = tuple(kind.value for kind in PrincipalKind if kind != PrincipalKind.AUDITOR)  # all but auditors

bearer = HTTPBearer(auto_error=False, description="a token from `parkway token create` or POST /v1/principals")
CHALLENGE = {"WWW-Authenticate": "Bearer"}


def authenticate(token: str | None) -> Principal:
    """The principal holding this token, read now (``identify``), if it may use the API beyond the decision
    record: an auditor reads that and nothing else (403; ``require`` admits it where a route names it)."""
    return admitted(identify(token), OPERATORS)


def identify(token: str | None) -> Principal:
    """The principal holding this token, read now, whatever its kind; raises a 401 ``ApiError`` otherwise."""
    if not token:
        raise ApiError(401, errors.NO_TOKEN, headers=CHALLENGE)
    # One read on its own, in autocommit: the caller's work (an answer through the SDK) must not wait
    # behind it, and a read needs no BEGIN and COMMIT round trips.
    with read_statement() as conn:
        principal = access.principal_by_token(conn, hash_token(token))
    if principal is None:
        raise ApiError(401, errors.BAD_TOKEN, headers=CHALLENGE)
    return principal


def token_holder(token: str | None, kinds: tuple[str, ...]) -> TokenHolder:
    """The holder of this token for the store to read in its first statement (no I/O here; a 401 ``ApiError``
    when there is no token). ``refused`` turns what the store then raises into the API's errors."""
    if not token:
        raise ApiError(401, errors.NO_TOKEN, headers=CHALLENGE)
    return TokenHolder(hash_token(token), kinds)


def refused(exc: Unauthenticated | WrongKind) -> ApiError:
    """The error ``authenticate`` then ``admitted`` give for what the store found of a ``TokenHolder``: a 401
    for a token no live principal holds; a 403 for the wrong kind, naming ``OPERATORS`` for a principal the
    API serves only the decision record (an auditor), else the kinds the call admits."""
    if isinstance(exc, Unauthenticated):
        return ApiError(401, errors.BAD_TOKEN, headers=CHALLENGE)
    return _wrong_kind(exc.name, exc.kind, exc.kinds if exc.kind in OPERATORS else OPERATORS)


def bearer_token(request: Request) -> str | None:
    """The request's bearer token, read as ``bearer`` (``TokenDep``) reads it, or ``None``: the same, in one call
    rather than a dependency solved and its credentials built."""
    scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def authentication_problem(request: Request) -> ApiError | None:
    """Why this request is not authenticated, or ``None`` (for error handlers that run before routes)."""
    if not request.url.path.startswith("/v1/"):
        return None
    try:
        identify(bearer_token(request))
    except ApiError as exc:
        return exc
    return None


def current_principal(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    return authenticate(presented(credentials))


PrincipalDep = Annotated[Principal, Depends(current_principal)]


def any_principal(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    return identify(presented(credentials))


# The bearer credentials as presented, not yet read (no I/O): for a route that authenticates on the thread
# its work runs on (an answer: one hop off the event loop, not two). ``bearer`` itself is the dependency:
# a wrapper around it would be one more dependency to solve on every request.
TokenDep = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def presented(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    """The token of ``TokenDep``'s credentials, or ``None`` when the request carried none."""
    return credentials.credentials if credentials is not None else None


def admitted(principal: Principal, kinds: tuple[str, ...]) -> Principal:
    """The principal, if it is of one of ``kinds``; a 403 ``ApiError`` otherwise."""
    if principal.kind not in kinds:
        raise _wrong_kind(principal.name, principal.kind, kinds)
    return principal


def _wrong_kind(name: str, kind: str, kinds: tuple[str, ...]) -> ApiError:
    return ApiError(403, errors.WRONG_KIND.format(kinds=" or ".join(kinds), kind=kind, name=name))


_executor: list[ThreadPoolExecutor] = []


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking work (the database, the broker) off the event loop in one hop to a plain thread pool
    of ``PARKWAY_DB_POOL_SIZE`` threads (more could only wait for a connection). A hop costs a third of
    the CPU of anyio's (which FastAPI uses for sync routes: a cancel scope and a capacity limiter each)."""
    if not _executor:
        _executor.append(ThreadPoolExecutor(get_settings().db_pool_size, thread_name_prefix="parkway-api"))
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(_executor[0], call)


def require(*kinds: str) -> Callable[[Principal], Awaitable[Principal]]:
    """A dependency that admits only principals of these kinds (403 for the others)."""

    async def check(principal: Annotated[Principal, Depends(any_principal)]) -> Principal:  # no I/O: no thread hop
        return admitted(principal, kinds)

    return check


AdminDep = Annotated[Principal, Depends(require("admin"))]
AgentDep = Annotated[Principal, Depends(require("agent"))]
AuditDep = Annotated[Principal, Depends(require("admin", "auditor"))]


def get_session() -> Iterator[Session]:
    """A session for reads, closed (its transaction ended) before the response is sent."""
    with session_factory()() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session, scope="function")]


# A list's paging parameters, the same on every list: ``next`` passed back, and the page's size. A cursor
# the API did not hand out is refused by ``api.errors`` (422 ``invalid_cursor``), wherever a list reads it.
CursorParam = Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_-]{1,500}$", description="a list's `next`")]
LimitParam = Annotated[int, Query(ge=1, le=200)]
# A list's filter by a name or target: text as the API stores it (no NUL), at most 200 characters.
TextFilter = Annotated[str | None, Query(max_length=200, pattern=TEXT)]
