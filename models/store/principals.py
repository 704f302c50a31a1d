"""Principals and grants: who may act, as the store is handed them (authenticated elsewhere)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from sqlalchemy import Select, String, and_, bindparam, exists, select, update
from sqlalchemy.orm import Session

from models import principal_sql
from models.base import utcnow
from models.principal_sql import unknown_principal as unknown_principal
from models.status import PrincipalKind
from models.store.driver import DriverStatement
from models.store.sql import GRANT, PRIN, Executor, by_name
from models.tables import Grant, Principal


def create_principal(session: Session, *, kind: str, name: str, token_hash: str | None) -> Principal | None:
    """none -> live: a new principal, one statement (``models.principal_sql``, which the CLI runs too); ``None``
    when the name (or the token) is taken (nothing is written)."""
    made = principal_sql.create_principal(session.connection().exec_driver_sql, kind=kind, name=name,
                                          token_hash=token_hash)  # fmt: skip
    return None if made is None else session.get(Principal, made)


@cache
def _principal_by_name() -> Select[Principal]:
    return select(Principal).where(Principal.name == bindparam("name"))


def principal_by_name(session: Session, name: str) -> Principal | None:
    return session.scalar(_principal_by_name(), {"name": name})


class Actor(Protocol):
    """Who answers or cancels: an ORM ``Principal`` (the API authenticated it) or a ``PrincipalRef``."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...


@dataclass(frozen=True)
class PrincipalRef:
    id: str
    name: str
    kind: str


@dataclass(frozen=True)
class TokenHolder:
    """Whoever holds the bearer token of this hash (the API's caller, not yet read), admitted only if of one of
    ``kinds``: the store reads it in the first statement of what it does for it, as a principal given by name."""

    token_hash: str
    kinds: tuple[str, ...]


def live_named(principals: Any) -> Any:
    """The live principal named ``:pname`` among ``principals`` (the table or an alias of it)."""
    return and_(principals.c.name == bindparam("pname"), principals.c.disabled_at.is_(None))


def live_holding(principals: Any) -> Any:
    """The live principal holding the token hashed ``:th`` among ``principals`` (disabling clears it too)."""
    return and_(principals.c.token_hash == bindparam("th"), principals.c.disabled_at.is_(None))


_PRINCIPAL_REF = DriverStatement(lambda: select(PRIN.c.id, PRIN.c.name, PRIN.c.kind).where(live_named(PRIN)))


def principal_ref_by_name(session: Executor, name: str) -> PrincipalRef | None:
    """The live principal's id, name and kind by name, as a plain read (no ORM entity to load and
    track; on the driver's cursor: an answer by name makes it first); ``None`` for a name no principal
    has, or a disabled one's."""
    row = _PRINCIPAL_REF.first(session, {"pname": name})
    return None if row is None else PrincipalRef(row.id, row.name, row.kind)


def lock_principal(session: Session, name: str) -> tuple[str, bool] | None:
    """The principal's id and whether it is live, its row locked until the transaction ends (a grant made now
    cannot slip past a disabling); ``None`` when no principal has the name. The statement the CLI runs too."""
    return principal_sql.lock_principal(session.connection().exec_driver_sql, name)


def create_grant(session: Session, *, principal_id: str, target: str) -> Grant:
    """none -> live: the principal's live grant of the target, made now, or the one it already holds (so one
    revoke always ends its access), one statement (``models.principal_sql``, which the CLI runs too). Callers
    hold the principal's row lock (``lock_principal``), so two grants of one target cannot be made
    side by side."""
    made = principal_sql.create_grant(session.connection().exec_driver_sql, principal_id=principal_id, target=target)
    grant = session.get(Grant, made)
    assert grant is not None  # written or read in this transaction
    return grant


def revoke_grant(session: Session, grant_id: str) -> Grant | None:
    """live -> revoked; ``None`` when the grant is unknown or already revoked."""
    return session.scalar(
        update(Grant)
        .where(Grant.id == grant_id, Grant.revoked_at.is_(None))
        .values(revoked_at=utcnow())
        .returning(Grant)
    )


def mark_revocation_swept(session: Session, grant_id: str) -> bool:
    """revoked -> revoked and swept: the sweep has ended every wait this revocation took the authority of
    (or none was left). ``False`` when it is not revoked or already swept."""
    swept = session.execute(
        update(Grant)
        .where(Grant.id == grant_id, Grant.revoked_at.is_not(None), Grant.swept_at.is_(None))
        .values(swept_at=utcnow())
        .returning(Grant.id)
    ).first()
    return swept is not None


def live_grant(principal_id: Any, target: Any) -> Any:
    """Whether ``principal_id`` holds a live grant on ``target`` (both expressions of the enclosing reads): the
    one grant rule of answers, cancels and leases."""
    granted = (GRANT.c.principal_id == principal_id, GRANT.c.target == target, GRANT.c.revoked_at.is_(None))
    return exists().where(*granted).correlate_except(GRANT)


# Whether ``:pid`` holds a live grant on ``:target`` (``parkway run start`` runs its text: models/start_sql.py).
@cache
def _granted() -> Any:
    return select(live_grant(bindparam("pid", type_=String), bindparam("target", type_=String)))


def is_granted(session: Session, principal: Principal, target: str) -> bool:
    """Whether the principal holds a live grant on the target, read now (admins hold every target)."""
    if principal.kind == PrincipalKind.ADMIN:
        return True
    return bool(session.scalar(_granted(), {"pid": principal.id, "target": target}))


ANSWERERS = (PrincipalKind.HUMAN.value, PrincipalKind.ADMIN.value)

# What the generated SQL's test reads by name (models/start_sql.py).
__getattr__ = by_name(PRINCIPAL_BY_NAME=_principal_by_name, GRANTED=_granted)
