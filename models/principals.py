"""A principal's lifecycle and the Decisions page's sessions: every transition one compare-and-set.

A principal is live -> disabled (never back: its name stays taken). Disabling clears its token hash, so no
bearer value matches it any more, and revokes its live grants in the same transaction, so every check
that reads grants (reads, answers, cancels, a run's authority) sees it holding none: the rule stays in one
place, the grants. Rotating replaces the token hash. Both add one to ``token_generation``; a page session
is bound to the generation it was made with and has ended once the principal's moved on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import and_, bindparam, insert, literal, select, tuple_, update
from sqlalchemy.orm import Session

from models.base import utcnow
from models.cursors import position_cursor, read_position, read_text, text_cursor
from models.status import PrincipalKind
from models.tables import Grant, PageSession, Principal

_P = Principal.__table__.c
_G = Grant.__table__.c
_S = PageSession.__table__.c

SESSION_TTL = timedelta(hours=12)


@dataclass(frozen=True)
class PrincipalInfo:
    """What an admin may list of a principal: never its token or the token's hash."""

    id: str
    kind: str
    name: str
    created_at: datetime
    disabled_at: datetime | None


_INFO = (_P.id, _P.kind, _P.name, _P.created_at, _P.disabled_at)


def _info(row: object) -> PrincipalInfo:
    return PrincipalInfo(*(getattr(row, c.key) for c in _INFO))


def principal_info(session: Session, principal_id: str) -> PrincipalInfo | None:
    row = session.execute(select(*_INFO).where(_P.id == principal_id)).first()
    return None if row is None else _info(row)


def list_principals(session: Session, *, cursor: str | None, limit: int) -> tuple[list[PrincipalInfo], str | None]:
    """Principals by name (disabled ones too, saying so); the cursor of the next page or ``None``."""
    stmt = select(*_INFO).order_by(_P.name).limit(limit + 1)
    if cursor is not None:
        stmt = stmt.where(_P.name > read_text(cursor))
    rows = [_info(row) for row in session.execute(stmt)]
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (text_cursor(rows[-1].name) if more and rows else None)


@dataclass(frozen=True)
class GrantInfo:
    """A grant as an admin lists it: its principal by name and kind."""

    id: str
    principal: str
    kind: str
    target: str
    created_at: datetime
    revoked_at: datetime | None


def list_grants(
    session: Session,
    *,
    principal: str | None = None,
    target: str | None = None,
    revoked_too: bool = False,
    cursor: str | None = None,
    limit: int,
) -> tuple[list[GrantInfo], str | None]:
    """The grants, oldest first, ``limit`` at a time: live ones unless ``revoked_too``, of the principal
    named ``principal`` and on ``target`` when given; the cursor of the next page or ``None``. A cursor is
    one such ``next`` (``cursors.InvalidCursor`` otherwise)."""
    query = select(_G.id, _P.name, _P.kind, _G.target, _G.created_at, _G.revoked_at).join(
        Principal.__table__, _P.id == _G.principal_id
    )
    if not revoked_too:
        query = query.where(_G.revoked_at.is_(None))
    if principal is not None:
        query = query.where(_P.name == principal)
    if target is not None:
        query = query.where(_G.target == target)
    if cursor is not None:
        query = query.where(tuple_(_G.created_at, _G.id) > tuple_(*read_position(cursor)))
    rows = [GrantInfo(*row) for row in session.execute(query.order_by(_G.created_at, _G.id).limit(limit + 1))]
    last = rows[limit - 1] if len(rows) > limit else None
    return rows[:limit], (position_cursor(last.created_at, last.id) if last is not None else None)


def _end_sessions(session: Session, principal_id: str, now: datetime) -> None:
    session.execute(
        update(PageSession)
        .where(PageSession.principal_id == principal_id, PageSession.ended_at.is_(None))
        .values(ended_at=now)
    )


def last_live_admin(session: Session, principal_id: str) -> bool:
    """Whether the principal is the only live admin. Every live admin's row stays locked until the caller's
    transaction ends: two admins disabling each other at once are decided one after the other, so the
    second finds itself the last one."""
    live = select(_P.id).where(_P.kind == PrincipalKind.ADMIN.value, _P.disabled_at.is_(None))
    return list(session.scalars(live.order_by(_P.id).with_for_update())) == [principal_id]


def disable(session: Session, principal_id: str) -> PrincipalInfo | None:
    """live -> disabled: the token hash cleared, the generation moved on, every live grant revoked and
    every open page session ended, in the caller's transaction. ``None`` when the principal is unknown
    or already disabled."""
    now = utcnow()
    row = session.execute(
        update(Principal)
        .where(Principal.id == principal_id, Principal.disabled_at.is_(None))
        .values(disabled_at=now, token_hash=None, token_generation=Principal.token_generation + 1)
        .returning(*_INFO)
    ).first()
    if row is None:
        return None
    session.execute(
        update(Grant).where(Grant.principal_id == principal_id, Grant.revoked_at.is_(None)).values(revoked_at=now)
    )
    _end_sessions(session, principal_id, now)
    return _info(row)


def rotate_token(session: Session, principal_id: str, token_hash: str) -> PrincipalInfo | None:
    """live -> live with a new token hash: the old token matches nothing from this commit on, and every
    page session made with it has ended. ``None`` when the principal is unknown or disabled."""
    row = session.execute(
        update(Principal)
        .where(Principal.id == principal_id, Principal.disabled_at.is_(None))
        .values(token_hash=token_hash, token_generation=Principal.token_generation + 1)
        .returning(*_INFO)
    ).first()
    if row is None:
        return None
    _end_sessions(session, principal_id, utcnow())
    return _info(row)


# --------------------------------------------------------------------------- Decisions page sessions


def session_hash(session_id: str) -> str:
    """Session ids are random and high-entropy: a plain SHA-256 is what is stored and looked up."""
    return hashlib.sha256(session_id.encode()).hexdigest()


def start_page_session(session: Session, *, token_hash: str, session_id: str) -> str | None:
    """none -> open: a session for the live principal holding this token hash, bound to its current
    token generation (one statement: a rotation cannot slip between reading the principal and binding
    the session). The principal's id, or ``None`` when no live principal holds the token."""
    now = utcnow()
    made = session.execute(
        insert(PageSession)
        .from_select(
            ["id_hash", "principal_id", "token_generation", "created_at", "expires_at"],
            select(
                literal(session_hash(session_id), _S.id_hash.type),
                _P.id,
                _P.token_generation,
                literal(now, _S.created_at.type),
                literal(now + SESSION_TTL, _S.expires_at.type),
            ).where(_P.token_hash == token_hash, _P.disabled_at.is_(None)),
        )
        .returning(PageSession.principal_id)
    ).first()
    return None if made is None else str(made.principal_id)


@cache
def _session_principal_statement() -> Any:
    return (
        select(_P.id, _P.kind, _P.name, _P.created_at)
        .join(PageSession.__table__, _S.principal_id == _P.id)
        .where(
            _S.id_hash == bindparam("h"),
            _S.ended_at.is_(None),
            _S.expires_at > bindparam("now", type_=_S.expires_at.type),
            and_(_P.disabled_at.is_(None), _P.token_generation == _S.token_generation),
        )
    )


def page_session_principal(session: Session, session_id: str) -> Principal | None:
    """The principal of an open page session, read now; ``None`` once it ended (signed out, expired,
    token rotated, principal disabled). Returned detached, as ``access.principal_by_token`` does."""
    row = session.execute(_session_principal_statement(), {"h": session_hash(session_id), "now": utcnow()}).first()
    if row is None:
        return None
    return Principal(id=row.id, kind=row.kind, name=row.name, created_at=row.created_at)


def end_page_session(session: Session, session_id: str) -> bool:
    """open -> ended (signing out); ``False`` when it was unknown or had ended already."""
    ended = session.execute(
        update(PageSession)
        .where(PageSession.id_hash == session_hash(session_id), PageSession.ended_at.is_(None))
        .values(ended_at=utcnow())
        .returning(PageSession.id_hash)
    ).first()
    return ended is not None
