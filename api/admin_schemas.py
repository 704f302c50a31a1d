"""The API's models of principals, grants and the health probes (the runs' and interactions' are in
``api.schemas``)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from api.schemas import TEXT, Body, PrincipalKindLiteral
from models.principals import GrantInfo
from models.tables import Grant

# --------------------------------------------------------------------------- principals and grants


class PrincipalCreate(Body):
    kind: PrincipalKindLiteral
    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@:-]*$")


class PrincipalCreated(BaseModel):
    id: str
    kind: PrincipalKindLiteral
    name: str
    token: str = Field(description="shown once; only its hash is stored")


class GrantCreate(Body):
    principal: str = Field(min_length=1, max_length=200, pattern=TEXT, description="the principal's name")
    target: str = Field(min_length=1, max_length=200, pattern=TEXT, description="e.g. `team:ops`, `user:ana`")


class GrantOut(BaseModel):
    id: str
    principal: str
    target: str
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def of(cls, grant: Grant | GrantInfo, principal: str) -> GrantOut:
        return cls(
            id=grant.id,
            principal=principal,
            target=grant.target,
            created_at=grant.created_at,
            revoked_at=grant.revoked_at,
        )


# --------------------------------------------------------------------------- health


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready"]
    schema_revision: str
