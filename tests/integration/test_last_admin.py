"""The last live admin cannot be disabled through the API, even by two admins disabling each other at once:
without a lock both would commit and leave no admin token (issue 35 §5)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import select, text

from api.errors import ApiError
from api.routes.principals import disable_principal
from models import store
from models.tables import Principal
from parkway.db import open_transaction, single_statement, transaction
from parkway.tokens import hash_token, new_token
from tests.support import WAITING_ON_A_LOCK, wait_for


def _admin(name: str) -> Principal:
    with transaction() as session:
        made = store.create_principal(session, kind="admin", name=name, token_hash=hash_token(new_token()))
        assert made is not None
        session.expunge(made)
    return made


def _waiting() -> int:
    """Statements on principals waiting for a lock (read outside the holder: its view of them is one snapshot)."""
    with single_statement() as conn:
        return len(conn.execute(WAITING_ON_A_LOCK, {"like": "%principals%"}).all())


def _disable(target: Principal, by: Principal) -> str:
    try:
        disable_principal(target.id, by)
    except ApiError as refused:
        return f"{refused.status_code} {refused.detail}"
    return "204"


def test_disable__two_last_admins_disabling_each_other_at_once_one_wins_the_other_409(fresh_db: str) -> None:
    # Given exactly two live admins, and their rows held by a reader so both disables wait at the same point
    ana, bob = _admin("root-ana"), _admin("root-bob")
    with open_transaction() as holder, ThreadPoolExecutor(2) as pool:
        holder.execute(text("SELECT id FROM principals WHERE kind = 'admin' FOR SHARE"))

        # When each disables the other at the same moment
        outcomes = [pool.submit(_disable, bob, ana), pool.submit(_disable, ana, bob)]
        wait_for(lambda: _waiting() == 2, what="both disables waiting on the admins' rows")
        holder.commit()
        said = sorted(outcome.result(timeout=30) for outcome in outcomes)

    # Then one wins, the other is refused with how to recover, and one admin is still live
    assert said[0] == "204" and said[1].startswith("409 principal"), said
    assert "parkway token create --kind admin" in said[1]
    with transaction() as session:
        live = session.scalars(select(Principal.name).where(Principal.kind == "admin", Principal.disabled_at.is_(None)))
        assert len(list(live)) == 1


def test_rotate__the_last_admin_rotating_its_own_token_gets_the_new_one_and_it_works(fresh_db: str) -> None:
    # Given a lone admin; When it rotates its own token over the API
    from api.deps import authenticate
    from api.routes.principals import rotate_token

    ana = _admin("root-only")
    rotated = rotate_token(ana.id, ana)

    # Then the response carries the new token, which authenticates as that admin: no lockout
    assert authenticate(rotated.token).id == ana.id
