"""Approval links: ``POST /v1/interactions/{id}/links`` hands out a URL for one person and one wait (admins,
or the agent that owns the run while granted on its target). The page it opens is ``api.pages.links``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import Depends, Path
from pydantic import BaseModel, Field

from api import errors
from api.deps import require
from api.errors import ApiError, documented
from api.input import checked_router
from api.routes.interactions import _authoritative as authoritative
from api.schemas import ID, TEXT, Body
from models import access, links
from models.base import utcnow
from models.status import PrincipalKind
from models.tables import Interaction, Principal
from parkway.db import transaction
from parkway.errors import InvalidAnswer

router = checked_router(prefix="/v1/interactions", tags=["interactions"])


class LinkIn(Body):
    principal: str = Field(min_length=1, max_length=200, pattern=TEXT, description="the person's name")
    expires_in: float | None = Field(
        None, gt=0, le=366 * 86400, description="seconds until the link expires, if sooner than the wait"
    )


class LinkOut(BaseModel):
    url: str = Field(description="absolute (PARKWAY_PUBLIC_URL); shown once: only its hash is stored")
    principal: str
    interaction_id: str
    expires_at: datetime | None = Field(description="the wait's expiry, or sooner; null: when the wait ends")


LinkerDep = Annotated[Principal, Depends(require(PrincipalKind.ADMIN.value, PrincipalKind.AGENT.value))]


@router.post(
    "/{interaction_id}/links",
    response_model=LinkOut,
    status_code=201,
    operation_id="create_approval_link",
    summary="A single-use URL for one person to decide this wait from an email or a chat (docs/teams.md)",
    responses=documented(401, 403, 404, 409, 410, 413, 422, models=errors.INTERACTION_OUTCOMES),
)
def create_link(
    interaction_id: Annotated[str, Path(pattern=ID, description="the interaction's id")],
    body: LinkIn,
    principal: LinkerDep,
) -> LinkOut:
    with transaction() as session:
        interaction = session.get(Interaction, interaction_id)
        if interaction is None:
            raise ApiError(404, errors.INTERACTION_NOT_FOUND.format(id=interaction_id))
        if not access.may_hand_out_links(session, principal, interaction_id):
            raise ApiError(403, errors.LINKS_FORBIDDEN.format(name=principal.name, id=interaction_id))
        view = access.interaction_view(session, interaction_id)
        ended = links.ended(view, access.run_status_of(session, interaction.run_id) or "") if view else None
        if ended is not None:  # the whole interaction as it is now, as an answer's 409 or 410 carries it
            raise authoritative(ended)
        person = access.live_person(session, body.principal)
        if person is None or not links.may_hold_place(session, interaction_id, person.id):
            raise InvalidAnswer(errors.LINK_NOBODY.format(name=body.principal, id=interaction_id))
        until = utcnow() + timedelta(seconds=body.expires_in) if body.expires_in is not None else None
        url, expires_at = links.hand_out(session, interaction, person, made_by=principal, expires_at=until)
    return LinkOut(url=url, principal=person.name, interaction_id=interaction_id, expires_at=expires_at)
