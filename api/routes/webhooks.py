"""Webhook subscriptions (admins): create (its signing secret in that response only), list, show, change,
delete, and the delivery log. docs/webhooks.md says what a receiver gets."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import Path, Response
from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict

from api import errors
from api.deps import AdminDep, CursorParam, LimitParam, SessionDep
from api.errors import ApiError, documented
from api.input import checked_router
from api.schemas import ID, TEXT, Body
from models import store, webhooks
from models.webhook_tables import Webhook
from parkway.crypto import seal
from parkway.db import transaction
from tasks.publish import publish_webhooks

router = checked_router(prefix="/v1/webhooks", tags=["webhooks"])

LINKS = (
    "deliveries of `interaction.asked`, `.reminded` and `.escalated` carry `links`: one approval link per person "
    "the wait names, for that person alone (docs/webhooks.md)"
)
WebhookId = Annotated[str, Path(pattern=ID, description="the subscription's id")]
Url = Annotated[str, Field(min_length=1, max_length=2000, pattern=TEXT, description="an http(s) URL")]
# What ``models.webhooks.input_problem`` accepts, listed so a client knows: a type, ``family.*``, or ``*``.
EVENT_PATTERNS = sorted(webhooks.EVENT_TYPES) + sorted(f"{family}.*" for family in webhooks.FAMILIES) + ["*"]
Patterns = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=64, pattern=TEXT, json_schema_extra={"enum": EVENT_PATTERNS})]],
    Field(min_length=1, max_length=100, description="event types (`run.completed`), families (`interaction.*`), `*`"),
]
Targets = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=200, pattern=TEXT)]] | None,
    Field(max_length=100, description="only events of runs on these targets; null: every target"),
]


class WebhookCreate(Body):
    url: Url
    events: Patterns
    targets: Targets = None
    description: Annotated[str | None, Field(max_length=2000, pattern=TEXT)] = None
    links: bool = Field(False, description=LINKS)


def _omitted_not_null(schema: JsonDict) -> None:
    """A field left out keeps its value; null is refused (``WEBHOOK_FIELD_NULL``): the schema says so."""
    kept = [branch for branch in schema.pop("anyOf", []) if branch != {"type": "null"}]  # type: ignore[union-attr]
    schema.update(kept[0] if kept else {})  # type: ignore[arg-type]


Omittable = Field(None, json_schema_extra=_omitted_not_null)


class WebhookChange(Body):
    url: Url | None = Omittable
    events: Patterns | None = Omittable
    targets: Targets = None
    description: Annotated[str | None, Field(max_length=2000, pattern=TEXT)] = None
    links: bool | None = Field(None, description=LINKS, json_schema_extra=_omitted_not_null)
    enabled: bool | None = Field(default=None, description="false: disable; true: resume from where it stopped")


class WebhookOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)  # read from a ``Webhook`` row: no secret among its fields

    id: str
    url: str
    events: list[str]
    targets: list[str] | None
    description: str | None
    links: bool = Field(description=LINKS)
    status: Literal["active", "failing", "disabled"]
    reason: str | None = Field(description="why it is failing or disabled")
    cursor: int = Field(description="the last event seq it is done with")
    created_at: datetime


class WebhookCreated(WebhookOut):
    secret: str = Field(description="`whsec_` + base64: the signing key, in this response only")


class SecretRotation(Body):
    overlap_s: float = Field(
        default=86400, ge=0, le=7 * 86400, description="how long requests carry the old secret's signature too"
    )


class Replay(Body):
    after_seq: int = Field(
        ge=0, le=2**63 - 1, description="send again every event after this seq (back from the cursor only)"
    )


class WebhookPage(BaseModel):
    items: list[WebhookOut]
    next: str | None


class DeliveryOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    seq: int
    attempt: int
    at: datetime
    status_code: int | None
    latency_ms: int | None
    error: str | None
    next_attempt_at: datetime | None


class DeliveryPage(BaseModel):
    items: list[DeliveryOut]
    next: str | None


def _checked(url: str | None, events: list[str] | None) -> None:
    """422 (nothing stored) for an event type that names nothing, or a URL that may not be reached."""
    problem = webhooks.input_problem(url, events)
    if problem is not None:
        raise ApiError(422, problem)


def _found(hook: Webhook | None, webhook_id: str) -> Webhook:
    if hook is None:
        raise ApiError(404, errors.WEBHOOK_NOT_FOUND.format(id=webhook_id))
    return hook


@router.post(
    "",
    status_code=201,
    response_model=WebhookCreated,
    operation_id="create_webhook",
    summary="Subscribe a URL to events (admins); its signing secret is in this response only",
    responses=documented(401, 403, 413, 422),
)
def create_webhook(body: WebhookCreate, admin: AdminDep) -> WebhookCreated:
    _checked(body.url, body.events)
    secret = webhooks.new_secret()
    with transaction() as session:
        hook = store.create_webhook(
            session,
            url=body.url,
            events=body.events,
            targets=body.targets,
            description=body.description,
            secret_sealed=seal(secret),
            links=body.links,
        )
        return WebhookCreated(**WebhookOut.model_validate(hook).model_dump(), secret=secret)


@router.get(
    "",
    response_model=WebhookPage,
    operation_id="list_webhooks",
    summary="Every subscription (admins)",
    responses=documented(401, 403, 422),
)
def list_webhooks(
    admin: AdminDep, session: SessionDep, cursor: CursorParam = None, limit: LimitParam = 50
) -> WebhookPage:
    items, after = webhooks.list_webhooks(session, cursor=cursor, limit=limit)  # a bad cursor: 422 (api/errors.py)
    return WebhookPage(items=[WebhookOut.model_validate(h) for h in items], next=after)


@router.get(
    "/{webhook_id}",
    response_model=WebhookOut,
    operation_id="get_webhook",
    summary="One subscription (admins); never its secret",
    responses=documented(401, 403, 404, 422),
)
def get_webhook(webhook_id: WebhookId, admin: AdminDep, session: SessionDep) -> WebhookOut:
    return WebhookOut.model_validate(_found(webhooks.get_webhook(session, webhook_id), webhook_id))


@router.patch(
    "/{webhook_id}",
    response_model=WebhookOut,
    operation_id="change_webhook",
    summary="Change a subscription's url, events, targets, description; disable or re-enable it",
    responses=documented(401, 403, 404, 413, 422),
)
def change_webhook(webhook_id: WebhookId, body: WebhookChange, admin: AdminDep) -> WebhookOut:
    _checked(body.url, body.events)
    changes = body.model_dump(exclude_unset=True, exclude={"enabled"})
    if any(changes.get(name, "") is None for name in ("url", "events", "links")):
        raise ApiError(422, errors.WEBHOOK_FIELD_NULL)
    with transaction() as session:
        hook = store.update_webhook(session, webhook_id, changes, body.enabled)
        return WebhookOut.model_validate(_found(hook, webhook_id))


@router.delete(
    "/{webhook_id}",
    status_code=204,
    response_class=Response,
    operation_id="delete_webhook",
    summary="Delete a subscription and its delivery log",
    responses=documented(401, 403, 404, 422),
)
def delete_webhook(webhook_id: WebhookId, admin: AdminDep) -> Response:
    with transaction() as session:
        if not store.delete_webhook(session, webhook_id):
            raise ApiError(404, errors.WEBHOOK_NOT_FOUND.format(id=webhook_id))
    return Response(status_code=204)


@router.get(
    "/{webhook_id}/deliveries",
    response_model=DeliveryPage,
    operation_id="list_webhook_deliveries",
    summary="The delivery log, newest first: event seq, attempt, status code, latency, error, next attempt",
    responses=documented(401, 403, 404, 422),
)
def list_deliveries(
    webhook_id: WebhookId,
    admin: AdminDep,
    session: SessionDep,
    cursor: CursorParam = None,
    limit: LimitParam = 50,
) -> DeliveryPage:
    _found(webhooks.get_webhook(session, webhook_id), webhook_id)
    items, after = webhooks.list_deliveries(session, webhook_id, cursor=cursor, limit=limit)
    return DeliveryPage(items=[DeliveryOut.model_validate(d) for d in items], next=after)


@router.post(
    "/{webhook_id}/secret",
    status_code=201,
    response_model=WebhookCreated,
    operation_id="rotate_webhook_secret",
    summary="A new signing secret (in this response only); requests carry the old one's signature too for the overlap",
    responses=documented(401, 403, 404, 413, 422),
)
def rotate_secret(webhook_id: WebhookId, body: SecretRotation, admin: AdminDep) -> WebhookCreated:
    secret = webhooks.new_secret()
    with transaction() as session:
        hook = _found(store.rotate_secret(session, webhook_id, seal(secret), body.overlap_s), webhook_id)
        return WebhookCreated(**WebhookOut.model_validate(hook).model_dump(), secret=secret)


@router.post(
    "/{webhook_id}/replay",
    status_code=202,
    response_model=WebhookOut,
    operation_id="replay_webhook",
    summary="Send the events after a seq again, with the webhook-ids they had the first time",
    responses=documented(401, 403, 404, 413, 422),
)
def replay(webhook_id: WebhookId, body: Replay, admin: AdminDep) -> WebhookOut:
    with transaction() as session:
        hook = store.replay(session, webhook_id, body.after_seq)
        if hook is None:
            _found(webhooks.get_webhook(session, webhook_id), webhook_id)
            raise ApiError(422, errors.REPLAY_FORWARD.format(seq=body.after_seq))
        shown = WebhookOut.model_validate(hook)
    publish_webhooks([webhook_id])  # after the commit; the sweep sends it should this be lost
    return shown
