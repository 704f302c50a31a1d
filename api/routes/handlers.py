"""Push handlers (admins; docs/worker-protocol.md, "Push"): register an HTTP URL that serves step names and
continuation keys (its signing secret in that response only), list them, remove one."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Path, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.deps import AdminDep, SessionDep
from api.errors import ApiError, documented
from api.input import checked_router
from api.protocol_schemas import SERVES_KEY, checked_serves
from api.schemas import ID, TEXT, Body
from models import store, webhooks
from parkway.crypto import seal
from parkway.db import transaction
from parkway.settings import get_settings

router = checked_router(prefix="/v1/handlers", tags=["push handlers"])

HandlerId = Annotated[str, Path(pattern=ID, description="the handler's id")]
HANDLER_NOT_FOUND = "push handler {id} does not exist"


class HandlerCreate(Body):
    url: str = Field(min_length=1, max_length=2000, pattern=TEXT, description="an http(s) URL (the webhooks' rules)")
    serves: list[Any] = Field(
        min_length=1, max_length=200, json_schema_extra={"items": SERVES_KEY},
        description="step names (`deploy.plan`) and continuation keys (`deploy.decide@1`) POSTed to the URL",
    )  # fmt: skip

    @model_validator(mode="after")
    def _keys(self) -> HandlerCreate:
        checked_serves(self.serves)
        return self


class HandlerOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)  # read from a ``PushHandler`` row: its secret is not a field

    id: str
    url: str
    serves: list[str]
    attempts: int = Field(description="POSTs made to it")
    failures: int = Field(description="POSTs that brought no committable outcome (retried, failed or interrupted)")
    created_at: datetime


class HandlerCreated(HandlerOut):
    secret: str = Field(description="`whsec_` + base64: the key its requests are signed with, in this response only")


class HandlerList(BaseModel):
    items: list[HandlerOut]


@router.post(
    "",
    status_code=201,
    response_model=HandlerCreated,
    operation_id="create_push_handler",
    summary="Register a push handler (admins): its keys count as served; its signing secret is in this response only",
    responses=documented(401, 403, 413, 422),
)
def create_handler(body: HandlerCreate, admin: AdminDep) -> HandlerCreated:
    problem = webhooks.input_problem(body.url, None)
    if problem is not None:
        raise ApiError(422, problem)
    secret = webhooks.new_secret()
    with transaction() as session:
        handler = store.create_handler(
            session, url=body.url, serves=body.serves, secret_sealed=seal(secret), live_s=get_settings().push_live_s
        )
        return HandlerCreated(**HandlerOut.model_validate(handler).model_dump(), secret=secret)


@router.get(
    "",
    response_model=HandlerList,
    operation_id="list_push_handlers",
    summary="Every push handler (admins), oldest first; never a secret",
    responses=documented(401, 403, 422),
)
def list_handlers(admin: AdminDep, session: SessionDep) -> HandlerList:
    return HandlerList(items=[HandlerOut.model_validate(h) for h in store.list_handlers(session)])


@router.delete(
    "/{handler_id}",
    status_code=204,
    response_class=Response,
    operation_id="delete_push_handler",
    summary="Remove a push handler: what it served is no longer served by it",
    responses=documented(401, 403, 404, 422),
)
def delete_handler(handler_id: HandlerId, admin: AdminDep) -> Response:
    with transaction() as session:
        if not store.delete_handler(session, handler_id):
            raise ApiError(404, HANDLER_NOT_FOUND.format(id=handler_id))
    return Response(status_code=204)
