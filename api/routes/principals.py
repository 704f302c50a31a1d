"""Principals (admins): create one and show its token once; only the token's hash is stored."""

from __future__ import annotations

from fastapi import APIRouter

from api import errors
from api.deps import AdminDep
from api.errors import ApiError, documented
from api.schemas import PrincipalCreate, PrincipalCreated
from models import store
from parkway.cli import hash_token, new_token
from parkway.db import transaction

router = APIRouter(prefix="/v1/principals", tags=["principals"])


@router.post(
    "",
    status_code=201,
    response_model=PrincipalCreated,
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
