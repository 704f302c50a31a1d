"""What ``parkway up`` makes on first start, in this process: never principals on a configured database;
Flower's login from FLOWER_BASIC_AUTH, or made once into a 0600 file and reused (issue 19, items 2 and 3)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from sqlalchemy import func, select

from models.tables import Principal
from parkway.cli_bootstrap import BOOTSTRAP, flower_login, welcome
from parkway.db import transaction
from parkway.errors import ConfigError
from parkway.settings import get_settings


def test_welcome__a_configured_database_gets_no_principals_only_the_way_to_make_them(fresh_db: str) -> None:
    with transaction() as session:
        before = session.scalar(select(func.count()).select_from(Principal))
    lines = welcome(get_settings())
    assert get_settings().embedded_database is False
    assert len(lines) == 1 and "PARKWAY_DATABASE_URL" in lines[0] and "parkway token create --kind admin" in lines[0]
    with transaction() as session:
        assert session.scalar(select(func.count()).select_from(Principal)) == before
        names = {name for _, name, _ in BOOTSTRAP}
        assert session.scalars(select(Principal.name).where(Principal.name.in_(names))).all() == []


def test_flower_login__made_once_into_a_0600_file_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOWER_BASIC_AUTH", raising=False)
    login, said, where = flower_login(tmp_path)
    path = tmp_path / "flower.auth"
    assert path.read_text().strip() == login and stat.S_IMODE(path.stat().st_mode) == 0o600
    user, _, password = login.partition(":")
    assert user == "parkway" and len(password) >= 20
    assert said == f"user:password {login}" and str(path) in where
    again, said_again, _ = flower_login(tmp_path)
    assert again == login and password not in said_again and str(path) in said_again
    assert [p.name for p in tmp_path.iterdir()] == ["flower.auth"], "no temporary file is left"


def test_flower_login__flower_basic_auth_wins_and_a_broken_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWER_BASIC_AUTH", "ops:s3cret-from-env")
    login, said, _ = flower_login(tmp_path)
    assert login == "ops:s3cret-from-env" and "s3cret" not in said
    assert not (tmp_path / "flower.auth").exists()
    monkeypatch.delenv("FLOWER_BASIC_AUTH")
    (tmp_path / "flower.auth").write_text("no-colon-here\n")
    with pytest.raises(ConfigError, match="does not hold user:password"):
        flower_login(tmp_path)


def test_flower_login__a_comma_separated_list_of_logins_is_passed_on_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWER_BASIC_AUTH", "ops:s3cret,dev:pa:ss")
    login, _, _ = flower_login(tmp_path)
    assert login == "ops:s3cret,dev:pa:ss"
