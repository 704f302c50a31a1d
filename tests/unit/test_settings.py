"""Settings: the secret key is refused when weak, required with a configured database, and made
once into a 0600 file on the embedded default; an invalid setting is refused by its variable's name."""

from __future__ import annotations

import re
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from parkway.errors import ConfigError
from parkway.settings import Settings, get_settings, reset_settings

GOOD_KEY = "k" * 32


def _settings(**values: str) -> Settings:
    return Settings(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["short", "x" * 31])
def test_secret_key__shorter_than_32_characters_is_refused(key: str) -> None:
    with pytest.raises(ConfigError, match="32"):
        _settings(secret_key=key, database_url="postgresql://db/parkway").resolved_secret_key()


def test_secret_key__32_characters_are_enough() -> None:
    assert _settings(secret_key=GOOD_KEY, database_url="postgresql://db/parkway").resolved_secret_key() == GOOD_KEY


@pytest.mark.parametrize(
    "key", ["please-change-me-to-a-long-random-string", "PLEASE-CHANGE-ME-TO-A-LONG-RANDOM-STRING"]
)
def test_secret_key__placeholder_is_refused_even_when_long(key: str) -> None:
    assert len(key) >= 32
    with pytest.raises(ConfigError):
        _settings(secret_key=key, database_url="postgresql://db/parkway").resolved_secret_key()


def test_secret_key__missing_is_refused_when_a_database_url_is_configured(tmp_path: Path) -> None:
    settings = _settings(secret_key="", database_url="postgresql://db/parkway", home=str(tmp_path))
    with pytest.raises(ConfigError, match="PARKWAY_SECRET_KEY"):
        settings.resolved_secret_key()
    assert not (tmp_path / "secret.key").exists()


def test_secret_key__embedded_default_creates_a_0600_key_file_once_and_reuses_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = _settings(secret_key="", database_url="", home=str(home))
    assert settings.embedded_database

    key = settings.resolved_secret_key()

    path = home / "secret.key"
    assert path.is_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(key) >= 32
    assert path.read_text().strip() == key
    inode = path.stat().st_ino

    # A second call, and a second process's settings, reuse the same key and file
    assert settings.resolved_secret_key() == key
    assert _settings(secret_key="", database_url="", home=str(home)).resolved_secret_key() == key
    assert path.stat().st_ino == inode

    # Another home gets another key
    other = _settings(secret_key="", database_url="", home=str(tmp_path / "other")).resolved_secret_key()
    assert other != key


def test_secret_key__environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARKWAY_SECRET_KEY", "too-short")
    monkeypatch.setenv("PARKWAY_DATABASE_URL", "postgresql://db/parkway")
    with pytest.raises(ConfigError):
        Settings().resolved_secret_key()


def test_db_pool_size__sizes_the_postgresql_pool_and_refuses_nonsense(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from parkway.db import make_engine
    from parkway.settings import reset_settings

    monkeypatch.setenv("PARKWAY_DB_POOL_SIZE", "3")
    reset_settings()
    try:
        engine = make_engine("postgresql://nobody@127.0.0.1:1/none")  # no connection is made here
        assert engine.pool.size() == 3  # type: ignore[attr-defined]
        engine.dispose()
        assert _settings().db_pool_size == 3
        for bad in ("0", "-1", "many"):
            monkeypatch.setenv("PARKWAY_DB_POOL_SIZE", bad)
            with pytest.raises(ValidationError, match="db_pool_size"):
                _settings()
    finally:
        monkeypatch.delenv("PARKWAY_DB_POOL_SIZE")
        reset_settings()


@pytest.mark.parametrize("content", ["", "\n", "short-key\n", "k" * 31])
def test_key_file__empty_or_short_is_refused_and_never_made_again_over(tmp_path: Path, content: str) -> None:
    # Given an embedded home whose key file was left empty or short (a crash, a bad copy, an editor)
    path = tmp_path / "secret.key"
    path.write_text(content)
    settings = _settings(secret_key="", database_url="", home=str(tmp_path))
    # Then it is refused with a message naming the file and why, and the file is left as it was
    with pytest.raises(ConfigError, match=re.escape(str(path))) as refused:
        settings.resolved_secret_key()
    assert ("is empty" if not content.strip() else "fewer than 32") in str(refused.value)
    assert path.read_text() == content


def test_database__unset_means_the_embedded_postgresql_under_home(tmp_path: Path) -> None:
    from parkway import embedded

    settings = _settings(database_url="", home=str(tmp_path / "home"))
    assert settings.embedded_dir == (tmp_path / "home").resolve() / "postgres" == embedded.data_dir(tmp_path / "home")
    configured = _settings(database_url="postgresql://db/parkway", home=str(tmp_path))
    assert configured.embedded_dir is None
    assert configured.effective_database_url == "postgresql://db/parkway"


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Settings read again from a changed environment; the session's read again after."""
    reset_settings()
    try:
        yield monkeypatch
    finally:
        monkeypatch.undo()
        reset_settings()


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("PARKWAY_CLAIM_LEASE_S", "abc", "valid number"),
        ("PARKWAY_CLAIM_LEASE_S", "-5", "greater than 0"),
        ("PARKWAY_DB_POOL_SIZE", "0", "greater than or equal to 1"),
        ("PARKWAY_BROKER_URL", "redis//hunter2@typo", "not a broker URL"),
        ("PARKWAY_BROKER_URL", "redis://a:6379/0;rabbit://hunter2@b", "not a broker URL"),
        ("PARKWAY_DATABASE_URL", "mysql://u:hunter2@h/d", "PostgreSQL only"),
        ("PARKWAY_DATABASE_URL", "hunter2@localhost/parkway", "PostgreSQL only"),
        ("PARKWAY_PUBLIC_URL", "parkway.example.com/hunter2", "http(s)://host"),
        ("PARKWAY_PUBLIC_URL", "ftp://hunter2.example.com", "http(s)://host"),
        ("PARKWAY_TRACE_WAITS", "parnet-hunter2", "link or parent"),
    ],
)
def test_invalid_setting__refused_by_its_variable_never_its_value(
    environment: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    environment.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        get_settings()
    message = str(refused.value)
    assert message.startswith(f"invalid settings: {name}: ") and says in message, message
    assert "hunter2" not in message


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PARKWAY_DATABASE_URL", "postgresql+psycopg://u:p@h:5432/d"),
        ("PARKWAY_DATABASE_URL", "postgres://u@h/d"),
        ("PARKWAY_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//"),
        ("PARKWAY_BROKER_URL", "redis://a:6379/0;redis://b:6379/0"),
    ],
)
def test_valid_urls__accepted(environment: pytest.MonkeyPatch, name: str, value: str) -> None:
    environment.setenv(name, value)
    assert getattr(get_settings(), name.removeprefix("PARKWAY_").lower()) == value


def test_workspace__in_the_home_unless_set(environment: pytest.MonkeyPatch, tmp_path: Path) -> None:
    environment.delenv("PARKWAY_WORKSPACE_DIR", raising=False)  # (the test session sets both)
    environment.delenv("PARKWAY_HOME", raising=False)
    assert _settings(home=str(tmp_path)).workspace == tmp_path / "workspaces"
    assert _settings(home=str(tmp_path), workspace_dir="/data/ws").workspace == Path("/data/ws")
    assert _settings().workspace == Path("var/workspaces")  # the README's ./var/workspaces


def test_public_url__links_start_with_it__default_the_api_s_own_address(environment: pytest.MonkeyPatch) -> None:
    assert get_settings().public_base == "http://127.0.0.1:8000"  # ``parkway up``'s API on its default port
    environment.setenv("PARKWAY_PUBLIC_URL", " https://parkway.example.com/ops/ ")
    reset_settings()
    assert get_settings().public_base == "https://parkway.example.com/ops"


def test_trace_waits__link_unless_parent__in_any_case(environment: pytest.MonkeyPatch) -> None:
    assert get_settings().trace_waits == "link"
    environment.setenv("PARKWAY_TRACE_WAITS", " Parent ")
    reset_settings()
    assert get_settings().trace_waits == "parent"
