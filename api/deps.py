"""Dependencies: the caller (``PrincipalDep`` and the kind-restricted aliases) and a read session."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api import errors
from api.errors import ApiError
from models import access
from models.tables import Principal
from parkway.cli import hash_token
from parkway.db import read_statement, session_factory

bearer = HTTPBearer(auto_error=False, description="a token from `parkway token create` or POST /v1/principals")
CHALLENGE = {"WWW-Authenticate": "Bearer"}


def authenticate(token: str | None) -> Principal:
    """The principal holding this token, read now; raises a 401 ``ApiError`` otherwise."""
    if not token:
        raise ApiError(401, errors.NO_TOKEN, headers=CHALLENGE)
    # One read on its own, in autocommit: the caller's work (an answer through the SDK) must not wait
    # behind it, and a read needs no BEGIN and COMMIT round trips.
    with read_statement() as conn:
        principal = access.principal_by_token(conn, hash_token(token))
    if principal is None:
        raise ApiError(401, errors.BAD_TOKEN, headers=CHALLENGE)
    return principal


def _token(authorization: str | None) -> str | None:
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def authentication_problem(request: Request) -> ApiError | None:
    """Why this request is not authenticated, or ``None`` (for error handlers that run before routes)."""
    if not request.url.path.startswith("/v1/"):
        return None
    try:
        authenticate(_token(request.headers.get("authorization")))
    except ApiError as exc:
        return exc
    return None


def current_principal(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    return authenticate(credentials.credentials if credentials is not None else None)


PrincipalDep = Annotated[Principal, Depends(current_principal)]


def require(*kinds: str) -> Callable[[Principal], Awaitable[Principal]]:
    """A dependency that admits only principals of these kinds (403 for the others)."""

    async def check(principal: PrincipalDep) -> Principal:  # no I/O: on the event loop, no thread hop
        if principal.kind not in kinds:
            raise ApiError(
                403,
                errors.WRONG_KIND.format(kinds=" or ".join(kinds), kind=principal.kind, name=principal.name),
            )
        return principal

    return check


AdminDep = Annotated[Principal, Depends(require("admin"))]
AgentDep = Annotated[Principal, Depends(require("agent"))]
AnswererDep = Annotated[Principal, Depends(require("human", "admin"))]


def get_session() -> Iterator[Session]:
    """A session for reads, closed (its transaction ended) before the response is sent."""
    with session_factory()() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session, scope="function")]
