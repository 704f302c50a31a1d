"""One settings object for every process, read from ``PARKWAY_*`` environment variables."""

from __future__ import annotations

import os
import secrets
from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from parkway.errors import ConfigError

DEFAULT_HOME = Path("var")
PLACEHOLDER_KEYS = {"change-me", "changeme", "secret", "please-change-me-to-a-long-random-string"}


class Settings(BaseSettings):
    """Configuration of Parkway (SPEC §1). Unset database and broker mean the embedded default."""

    model_config = SettingsConfigDict(env_prefix="PARKWAY_", extra="ignore")

    database_url: str = ""
    broker_url: str = ""
    imports: str = ""
    secret_key: str = ""
    sweep_interval_s: float = Field(default=5.0, gt=0)
    sweep_batch: int = Field(default=500, gt=0)
    claim_lease_s: float = Field(default=30.0, gt=0)
    reenqueue_after_s: float = Field(default=10.0, ge=0)
    max_attempts: int = Field(default=5, ge=1)
    db_pool_size: int = Field(default=10, ge=1, le=500)
    workspace_dir: str = "var/workspaces"
    home: str = str(DEFAULT_HOME)
    crash_at: str = ""

    @field_validator("imports")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()

    @property
    def embedded_database(self) -> bool:
        return not self.database_url

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{Path(self.home).resolve() / 'parkway.sqlite3'}"

    @property
    def broker_folder(self) -> Path:
        return Path(self.home).resolve() / "broker"

    @property
    def effective_broker_url(self) -> str:
        return self.broker_url or "filesystem://"

    @property
    def import_modules(self) -> list[str]:
        return [m.strip() for m in self.imports.split(",") if m.strip()]

    def resolved_secret_key(self) -> str:
        """The secret key, or a clear refusal; on the embedded default a key is made once into a 0600 file."""
        key = self.secret_key
        if key:
            if len(key) < 32 or key.lower() in PLACEHOLDER_KEYS:
                raise ConfigError("PARKWAY_SECRET_KEY must be a random string of at least 32 characters")
            return key
        if not self.embedded_database:
            raise ConfigError("PARKWAY_SECRET_KEY is not set; it is required when PARKWAY_DATABASE_URL is configured")
        return _embedded_key(Path(self.home).resolve() / "secret.key")


def _embedded_key(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_urlsafe(48))
    return path.read_text().strip()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def reset_settings() -> None:
    """Forget the cached settings (tests and the CLI change the environment)."""
    get_settings.cache_clear()
