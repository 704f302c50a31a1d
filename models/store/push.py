"""Push handlers (docs/worker-protocol.md, "Push"): an admin registers an HTTP URL that serves step names and
continuation keys; ``tasks.push`` POSTs their work to it.

A handler is listed in the worker registry while it is registered (node ``push:<id>``, never expiring), so
what it serves counts as served for starts, parks and fail-closed, and a Celery worker that claims its work
hands it on to the push queue (``tasks.publish``). Registration and its registry row are one transaction, as
are the removal and the row's withdrawal.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import any_, delete, insert, literal, select, update
from sqlalchemy.orm import Session

from models.served import PUSH_NODE
from models.store.sql import Executor, new_id
from models.store.workers import Advert, advertise, withdraw
from models.webhook_tables import PushHandler

_REGISTERED_S = 100 * 365 * 86400.0  # a handler's registry row lives until the handler is removed
_H = PushHandler.__table__.c


def push_node(handler_id: str) -> str:
    return PUSH_NODE + handler_id


def create_handler(session: Session, *, url: str, serves: list[str], secret_sealed: str) -> PushHandler:
    """none -> registered, its keys advertised in the worker registry in the same transaction."""
    handler_id = new_id()
    keys = sorted(set(serves))
    session.execute(insert(PushHandler).values(id=handler_id, url=url, serves=keys, secret_sealed=secret_sealed,
                                               attempts=0, failures=0))  # fmt: skip
    advertise(session, Advert(id=handler_id, node=push_node(handler_id), pid=0,
                              steps=tuple(k for k in keys if "@" not in k),
                              continuations=tuple(k for k in keys if "@" in k), ttl_s=_REGISTERED_S))  # fmt: skip
    handler = session.get(PushHandler, handler_id)
    assert handler is not None
    return handler


def list_handlers(session: Session) -> list[PushHandler]:
    return list(session.scalars(select(PushHandler).order_by(PushHandler.created_at, PushHandler.id)))


def delete_handler(session: Session, handler_id: str) -> bool:
    """registered -> gone, its registry row withdrawn with it; ``False`` when there was none."""
    gone = session.execute(delete(PushHandler).where(_H.id == handler_id).returning(_H.id)).first()
    withdraw(session, handler_id)
    return gone is not None


@dataclass(frozen=True)
class Target:
    """Where a push goes: the handler, its URL and its sealed secret."""

    id: str
    url: str
    secret_sealed: str


def handler_serving(conn: Executor, key: str) -> Target | None:
    """A registered handler that serves ``key`` (a step name or ``name@version``), the oldest first."""
    row = conn.execute(
        select(_H.id, _H.url, _H.secret_sealed).where(literal(key) == any_(_H.serves)).order_by(_H.created_at).limit(1)
    ).first()
    return None if row is None else Target(row.id, row.url, row.secret_sealed)


def count_push(conn: Executor, handler_id: str, *, failed: bool) -> None:
    """attempts + 1 (and failures + 1 when the POST brought no committable outcome), for ``/metrics``."""
    conn.execute(update(PushHandler).where(_H.id == handler_id)
                 .values(attempts=_H.attempts + 1, failures=_H.failures + int(failed)))  # fmt: skip


def push_counts(session: Executor) -> list[tuple[str, int, int]]:
    """(handler id, attempts, failures) of every registered handler."""
    rows = session.execute(select(_H.id, _H.attempts, _H.failures).order_by(_H.id))
    return [(row.id, int(row.attempts), int(row.failures)) for row in rows]
