"""Grants (admins): give a principal a target, revoke it; every request reads them anew."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Response
from pydantic import BaseModel, Field

from api import errors
from api.admin_schemas import GrantCreate, GrantOut
from api.deps import AdminDep, CursorParam, LimitParam, SessionDep
from api.errors import ApiError, documented
from api.input import checked_router
from api.schemas import ID, TEXT
from models import access, principals, store
from parkway.db import transaction

router = checked_router(prefix="/v1/grants", tags=["grants"])


class GrantPage(BaseModel):
    items: list[GrantOut]
    next: str | None = Field(description="pass back as `?cursor=` for the next page; null on the last")


@router.get(
    "",
    response_model=GrantPage,
    operation_id="list_grants",
    summary="The grants, oldest first (admins): live ones, or revoked ones too; by principal and target",
    responses=documented(401, 403, 422),
)
def list_grants(
    admin: AdminDep,
    session: SessionDep,
    principal: Annotated[
        str | None, Query(max_length=200, pattern=TEXT, description="only the grants of the principal of this name")
    ] = None,
    target: Annotated[
        str | None, Query(max_length=200, pattern=TEXT, description="only the grants on this target")
    ] = None,
    revoked: Annotated[bool, Query(description="revoked grants too (`revoked_at` set)")] = False,
    cursor: CursorParam = None,
    limit: LimitParam = 50,
) -> GrantPage:
    items, after = principals.list_grants(
        session, principal=principal, target=target, revoked_too=revoked, cursor=cursor, limit=limit
    )
    return GrantPage(items=[GrantOut.of(g, g.principal) for g in items], next=after)


@router.post(
    "",
    status_code=201,
    response_model=GrantOut,
    operation_id="create_grant",
    summary="Grant a principal (by name) access to a target",
    responses=documented(401, 403, 413, 422),
)
def create_grant(body: GrantCreate, admin: AdminDep) -> GrantOut:
    with transaction() as session:
        found = store.lock_principal(session, body.principal)  # no grant slips past a disabling
        if found is None or not found[1]:
            said = errors.UNKNOWN_PRINCIPAL if found is None else errors.PRINCIPAL_DISABLED
            raise ApiError(422, said.format(name=body.principal), code="unknown_principal")
        grant = store.create_grant(session, principal_id=found[0], target=body.target)
        return GrantOut.of(grant, body.principal)


@router.delete(
    "/{grant_id}",
    status_code=204,
    response_class=Response,
    operation_id="revoke_grant",
    summary="Revoke a grant; reads and answers are denied from the next request on",
    responses=documented(401, 403, 404, 422),
)
def revoke_grant(grant_id: Annotated[str, Path(pattern=ID, description="the grant's id")], admin: AdminDep) -> Response:
    """Revoking an already revoked grant is a no-op (204); an unknown id is 404."""
    with transaction() as session:
        if store.revoke_grant(session, grant_id) is None and access.grant_by_id(session, grant_id) is None:
            raise ApiError(404, errors.GRANT_NOT_FOUND.format(id=grant_id))
    return Response(status_code=204)
