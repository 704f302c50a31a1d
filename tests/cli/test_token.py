"""``parkway token revoke`` and ``parkway token rotate``, run as a subprocess against the test database."""

from __future__ import annotations

import uuid

from sqlalchemy import select

from models import access, store
from models.tables import Grant, Principal
from parkway.db import read_statement, transaction
from parkway.tokens import hash_token
from tests.support import TARGET, Stack


def holder(token: str) -> str | None:
    """The name of the principal a bearer token authenticates as now, or ``None``."""
    with read_statement() as conn:
        found = access.principal_by_token(conn, hash_token(token))
    return None if found is None else found.name


def created(stack: Stack, kind: str = "human") -> tuple[str, str]:
    name = f"cli-{kind}-{uuid.uuid4().hex[:8]}"
    made = stack.parkway("token", "create", "--kind", kind, "--name", name)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    with transaction() as session:
        principal = store.principal_by_name(session, name)
        assert principal is not None
        store.create_grant(session, principal_id=principal.id, target=TARGET)
    return name, token


def test_token_rotate__prints_the_new_token_once_on_stdout_alone_and_the_old_one_ends(stack: Stack) -> None:
    name, old = created(stack)
    assert holder(old) == name
    rotated = stack.parkway("token", "rotate", name)
    assert rotated.returncode == 0, rotated.stderr
    lines = rotated.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pk_") and lines[0] != old
    assert old not in rotated.stderr and lines[0] not in rotated.stderr
    assert holder(old) is None
    assert holder(lines[0]) == name
    unknown = stack.parkway("token", "rotate", "nobody-" + uuid.uuid4().hex)
    assert unknown.returncode == 1 and unknown.stdout == "" and "does not exist" in unknown.stderr


def test_token_revoke__disables_the_principal_its_token_and_grants(stack: Stack) -> None:
    name, token = created(stack, "agent")
    revoked = stack.parkway("token", "revoke", name)
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout == "" and token not in revoked.stderr
    assert holder(token) is None
    with transaction() as session:
        principal = session.scalars(select(Principal).where(Principal.name == name)).one()
        assert principal.disabled_at is not None and principal.token_hash is None
        grants = session.scalars(select(Grant.revoked_at).where(Grant.principal_id == principal.id)).all()
    assert grants and all(at is not None for at in grants)
    # Its name stays taken; a disabled principal's token is not rotated; revoking again is a no-op
    again = stack.parkway("token", "create", "--kind", "agent", "--name", name)
    assert again.returncode == 1 and "taken" in again.stderr
    rotate = stack.parkway("token", "rotate", name)
    assert rotate.returncode == 1 and rotate.stdout == "" and "disabled" in rotate.stderr
    assert stack.parkway("token", "revoke", name).returncode == 0
    unknown = stack.parkway("token", "revoke", "nobody-" + uuid.uuid4().hex)
    assert unknown.returncode == 1 and "no principal" in unknown.stderr


def test_token_create_worker__token_alone_on_stdout__stderr_says_how_to_grant_it(stack: Stack) -> None:
    name = f"cli-worker-{uuid.uuid4().hex[:8]}"
    made = stack.parkway("token", "create", "--kind", "worker", "--name", name)
    assert made.returncode == 0, made.stderr
    [token] = made.stdout.splitlines()
    assert holder(token) == name and token not in made.stderr
    # A worker leases only runs on targets it is granted on: the operator is told how
    assert f"parkway grant create --principal {name} --target" in made.stderr, made.stderr
