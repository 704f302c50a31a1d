"""Making a principal and a grant, each one SQL statement run through a DB-API ``execute``: the store's
functions (``models.store.principals``, on an ORM session's connection) and the CLI's quick commands
(``parkway token create``, ``parkway grant create``, on a plain psycopg connection, without importing
SQLAlchemy) run the same statement, so each transition has one implementation.

``execute`` is psycopg's ``Connection.execute`` or SQLAlchemy's ``Connection.exec_driver_sql``: both take the
driver's ``%(name)s`` parameters and return something with ``fetchone()``. The caller owns the transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from models.status import PrincipalKind
from parkway.errors import Forbidden

Execute = Callable[[str, Mapping[str, Any]], Any]

CREATE_PRINCIPAL = """
INSERT INTO principals (id, kind, name, token_hash, created_at, token_generation)
VALUES (%(id)s, %(kind)s, %(name)s, %(token_hash)s, %(at)s, 0)
ON CONFLICT DO NOTHING
RETURNING id"""

# The principal's row locked, so no grant is made for it while it is being disabled (and two grants of one
# target cannot be made side by side); ``live`` is false once it is disabled.
LOCK_PRINCIPAL = "SELECT id, disabled_at IS NULL AS live FROM principals WHERE name = %(name)s FOR UPDATE"

# The live grant the principal holds on the target, or a new one: one revoke always ends its access.
CREATE_GRANT = """
WITH held AS (
    SELECT id FROM grants WHERE principal_id = %(pid)s AND target = %(target)s AND revoked_at IS NULL
), made AS (
    INSERT INTO grants (id, principal_id, target, created_at)
    SELECT %(id)s, %(pid)s, %(target)s, %(at)s WHERE NOT EXISTS (SELECT FROM held)
    RETURNING id
)
SELECT id FROM held UNION ALL SELECT id FROM made"""


def create_principal(execute: Execute, *, kind: str, name: str, token_hash: str | None) -> str | None:
    """none -> live: the new principal's id; ``None`` when the name (or the token) is taken (nothing is
    written)."""
    values = {"id": uuid.uuid4().hex, "kind": PrincipalKind(kind).value, "name": name, "token_hash": token_hash,
              "at": datetime.now(UTC)}  # fmt: skip
    row = execute(CREATE_PRINCIPAL, values).fetchone()
    return None if row is None else str(row[0])


def lock_principal(execute: Execute, name: str) -> tuple[str, bool] | None:
    """The principal's id and whether it is live, its row locked until the transaction ends; ``None`` when
    no principal has the name."""
    row = execute(LOCK_PRINCIPAL, {"name": name}).fetchone()
    return None if row is None else (str(row[0]), bool(row[1]))


def create_grant(execute: Execute, *, principal_id: str, target: str) -> str:
    """none -> live: the id of the principal's live grant of the target, made now or the one it already
    holds. Callers hold the principal's row lock (``lock_principal``)."""
    values = {"id": uuid.uuid4().hex, "pid": principal_id, "target": target, "at": datetime.now(UTC)}
    return str(execute(CREATE_GRANT, values).fetchone()[0])


def unknown_principal(name: str) -> Forbidden:
    return Forbidden(f"principal {name} does not exist or is disabled")
