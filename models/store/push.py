"""Push handlers (docs/worker-protocol.md, "Push"): an admin registers an HTTP URL that serves step names and
continuation keys; ``tasks.push`` POSTs their work to it.

A handler has a row in the worker registry (node ``push:<id>``), live by its own record of success
(``models.served``): registration, then each push it accepts (a 2xx with a committable outcome), makes it
live for ``PARKWAY_PUSH_LIVE_S`` more and stamps its keys advertised; a handler that accepts nothing for that
long, or is gone, serves nothing. A 410 for a key takes that key out of its row (``refuse``): it no longer
serves it, and is no longer offered its work, until it is registered again or its row is forgotten
(``FORGET_AFTER_S`` after it expired). While a live handler serves a key, a Celery worker that claims its work
hands it on to the push queue (``tasks.publish``); a registered handler whose row has not refused the key
is offered its due work even when not live (``models.store.workers.Serving.offer``): its success makes it
live again. Registration and its registry row are one transaction, as are the removal and the row's
withdrawal.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from models.clock import db_now
from models.served import PUSH_NODE, WORKERS
from models.status import ContinuationKind
from models.store.sql import Executor, new_id
from models.store.workers import Advert, advertise, offered_handlers, withdraw
from models.webhook_tables import PushHandler

_H = PushHandler.__table__.c


def push_node(handler_id: str) -> str:
    return PUSH_NODE + handler_id


def _advert(handler_id: str, keys: list[str], live_s: float) -> Advert:
    """Its row, live for ``live_s``; rewritten by a success only once a quarter of that old (as a remote
    worker's lease calls), so a busy handler's pushes write nothing there."""
    return Advert(id=handler_id, node=push_node(handler_id), pid=0, steps=tuple(k for k in keys if "@" not in k),
                  continuations=tuple(k for k in keys if "@" in k), ttl_s=live_s, refresh_s=live_s / 4)  # fmt: skip


def create_handler(session: Session, *, url: str, serves: list[str], secret_sealed: str, live_s: float) -> PushHandler:
    """none -> registered, its keys advertised in the worker registry in the same transaction, live for
    ``live_s`` (``PARKWAY_PUSH_LIVE_S``) unless a push it accepts stamps it again (``accepted``)."""
    handler_id = new_id()
    keys = sorted(set(serves))
    session.execute(insert(PushHandler).values(id=handler_id, url=url, serves=keys, secret_sealed=secret_sealed,
                                               attempts=0, failures=0))  # fmt: skip
    advertise(session, _advert(handler_id, keys, live_s))
    handler = session.get(PushHandler, handler_id)
    assert handler is not None
    return handler


def accepted(session: Session, handler_id: str, key: str, live_s: float) -> None:
    """A push of ``key`` accepted (its outcome committable): the handler's row live for ``live_s`` more, its
    keys (those it has not refused, and ``key``) advertised now (``_advert``: unless it was stamped within a
    quarter of that and serves the same keys). The row locked first, so a refusal of another push is never
    overwritten."""
    row = session.execute(
        select(WORKERS.c.steps, WORKERS.c.continuations).where(WORKERS.c.id == handler_id).with_for_update()
    ).first()
    registered = session.scalar(select(_H.serves).where(_H.id == handler_id))
    if registered is None:  # removed since
        return
    kept = set(registered) if row is None else {*row.steps, *row.continuations}
    advertise(session, _advert(handler_id, sorted(kept & set(registered) | {key}), live_s))


def refuse(conn: Executor, handler_id: str, kind: str, key: str) -> None:
    """serving ``key`` -> not serving it: the handler answered 410 for it. Its row keeps its expiry (a row
    forgotten since is written again, expired, with its other registered keys), so it is neither a server of
    ``key`` nor offered its work (``models.store.workers.offered_handlers``) from now on. One upsert."""
    registered = conn.execute(select(_H.serves).where(_H.id == handler_id)).scalar()
    if registered is None:  # removed since
        return
    kept = [k for k in registered if k != key]
    column = WORKERS.c.steps if kind == ContinuationKind.START else WORKERS.c.continuations
    row = pg_insert(WORKERS).values(
        id=handler_id, node=push_node(handler_id), pid=0, steps=[k for k in kept if "@" not in k],
        continuations=[k for k in kept if "@" in k], started_at=db_now(), heartbeat_at=db_now(),
        expires_at=db_now(),
    )  # fmt: skip
    conn.execute(row.on_conflict_do_update(index_elements=[WORKERS.c.id],
                                           set_={column.key: func.array_remove(column, key)}))  # fmt: skip


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


def handler_serving(conn: Executor, kind: str, key: str) -> Target | None:
    """The handler that a push of ``key`` (a step name or ``name@version``) goes to: a registered one that has
    not refused it, a live one first, then the oldest (``models.store.workers.offered_handlers``)."""
    offered = offered_handlers(kind, key).subquery()
    row = conn.execute(
        select(_H.id, _H.url, _H.secret_sealed).join(offered, offered.c.id == _H.id).order_by(offered.c.rank).limit(1)
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
