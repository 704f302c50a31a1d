"""Principals (admins): create, list, disable one, rotate its token; a token is shown once, only its hash
is stored, and no response ever carries a token hash."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Path, Response
from pydantic import BaseModel, Field

from api import errors
from api.admin_schemas import PrincipalCreate, PrincipalCreated
from api.deps import AdminDep, CursorParam, LimitParam, SessionDep
from api.errors import ApiError, documented
from api.input import checked_router
from api.schemas import ID, PrincipalKindLiteral
from models import principals, store
from models.principals import PrincipalInfo
from parkway.db import transaction
from parkway.tokens import hash_token, new_token

router = checked_router(prefix="/v1/principals", tags=["principals"])

PrincipalId = Annotated[str, Path(pattern=ID, description="the principal's id")]


class PrincipalOut(BaseModel):
    id: str
    kind: PrincipalKindLiteral
    name: str
    created_at: datetime
    disabled_at: datetime | None = Field(description="when it was disabled; null while it is live")

    @classmethod
    def of(cls, info: PrincipalInfo) -> PrincipalOut:
        return cls(
            id=info.id,
            kind=info.kind,  # type: ignore[arg-type]  # a PrincipalKind value
            name=info.name,
            created_at=info.created_at,
            disabled_at=info.disabled_at,
        )


class PrincipalPage(BaseModel):
    items: list[PrincipalOut]
    next: str | None = Field(description="pass back as `?cursor=` for the next page; null on the last")


@router.post(
    "",
    status_code=201,
    response_model=PrincipalCreated,
    operation_id="create_principal",
    summary="Create a principal (admins); its token is in this response only",
    responses=documented(401, 403, 409, 413, 422),
)
def create_principal(body: PrincipalCreate, admin: AdminDep) -> PrincipalCreated:
    token = new_token()
    with transaction() as session:
        principal = store.create_principal(session, kind=body.kind, name=body.name, token_hash=hash_token(token))
        if principal is None:
            raise ApiError(409, errors.NAME_TAKEN.format(name=body.name))
        return PrincipalCreated(id=principal.id, kind=body.kind, name=principal.name, token=token)


@router.get(
    "",
    response_model=PrincipalPage,
    operation_id="list_principals",
    summary="Every principal by name: id, kind, name, created_at, disabled_at (admins); never a token",
    responses=documented(401, 403, 422),
)
def list_principals(
    admin: AdminDep,
    session: SessionDep,
    cursor: CursorParam = None,
    limit: LimitParam = 50,
) -> PrincipalPage:
    items, after = principals.list_principals(session, cursor=cursor, limit=limit)
    return PrincipalPage(items=[PrincipalOut.of(i) for i in items], next=after)


@router.delete(
    "/{principal_id}",
    status_code=204,
    response_class=Response,
    operation_id="disable_principal",
    summary="Disable a principal: its token gets 401 from now on, its grants are revoked, its page sessions end "
    "(never the last live admin: 409)",
    responses=documented(401, 403, 404, 409, 422),
)
def disable_principal(principal_id: PrincipalId, admin: AdminDep) -> Response:
    """Disabling a disabled principal is a no-op (204); an unknown id is 404; an admin disabling itself,
    or the last live admin, is 409. The name stays taken."""
    if principal_id == admin.id:
        raise ApiError(409, errors.DISABLE_SELF)
    with transaction() as session:
        if principals.last_live_admin(session, principal_id):
            raise ApiError(409, errors.LAST_ADMIN.format(id=principal_id))
        disabled = principals.disable(session, principal_id)
        if disabled is None and principals.principal_info(session, principal_id) is None:
            raise ApiError(404, errors.PRINCIPAL_NOT_FOUND.format(id=principal_id))
    return Response(status_code=204)


@router.post(
    "/{principal_id}/token",
    status_code=201,
    response_model=PrincipalCreated,
    operation_id="rotate_principal_token",
    summary="Rotate a principal's token: the new one is in this response only, the old one gets 401 at once",
    responses=documented(401, 403, 404, 409, 413, 422),
)
def rotate_token(principal_id: PrincipalId, admin: AdminDep) -> PrincipalCreated:
    """Every Decisions session made with the old token ends. A disabled principal's token is not
    rotated (409)."""
    token = new_token()
    with transaction() as session:
        rotated = principals.rotate_token(session, principal_id, hash_token(token))
        if rotated is None:
            info = principals.principal_info(session, principal_id)
            if info is None:
                raise ApiError(404, errors.PRINCIPAL_NOT_FOUND.format(id=principal_id))
            raise ApiError(409, errors.PRINCIPAL_DISABLED.format(name=info.name))
    return PrincipalCreated(id=rotated.id, kind=rotated.kind, name=rotated.name, token=token)  # type: ignore[arg-type]
