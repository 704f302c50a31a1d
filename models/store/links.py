"""Approval links (``models.link_tables``): handed out (none -> live), and used (live -> used) in the
transaction of the answer it makes, so a link decides once or not at all."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any, cast

from sqlalchemy import Table, bindparam, or_, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from models.base import utcnow
from models.clock import db_now
from models.link_tables import ApprovalLink
from models.store.sql import Executor, new_id

LINK = cast(Table, ApprovalLink.__table__)


@cache
def _use() -> Any:
    return (
        update(LINK)
        .where(
            LINK.c.id == bindparam("lid"),
            LINK.c.used_at.is_(None),
            or_(LINK.c.expires_at.is_(None), LINK.c.expires_at > db_now()),
        )
        .values(used_at=bindparam("at"), response_id=bindparam("rsp"), justification=bindparam("why"))
        .returning(LINK.c.id)
    )


def make_link(
    session: Executor,
    *,
    token_hash: str,
    interaction_id: str,
    principal_id: str,
    expires_at: datetime | None,
    made_by_id: str | None = None,
    webhook_id: str | None = None,
) -> bool:
    """none -> live: a link for ``principal_id`` on ``interaction_id``, stored by its token's hash; ``False``
    when a link with that hash exists already (a delivery sent again: its link is the one made the first
    time), nothing written then."""
    values: dict[str, Any] = {"id": new_id(), "token_hash": token_hash, "interaction_id": interaction_id,
                              "principal_id": principal_id, "made_by_id": made_by_id, "webhook_id": webhook_id,
                              "expires_at": expires_at, "created_at": utcnow()}  # fmt: skip
    made = pg_insert(LINK).values(**values).on_conflict_do_nothing(index_elements=["token_hash"]).returning(LINK.c.id)
    return session.execute(made).first() is not None


def use_link(session: Executor, link_id: str, *, response_id: str, justification: str | None) -> bool:
    """live -> used, with the response the link made and the justification given; ``False`` when it was
    used already or is past its expiry (nothing written: the caller rolls its answer back)."""
    params = {"lid": link_id, "at": utcnow(), "rsp": response_id, "why": justification}
    return session.execute(_use(), params).first() is not None
