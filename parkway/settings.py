"""One settings object for every process, read from ``PARKWAY_*`` environment variables."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from parkway import embedded, valkey
from parkway.errors import ConfigError

ENV_PREFIX = "PARKWAY_"  # each setting is read from PARKWAY_<NAME>, the name in any case
DEFAULT_HOME = Path("var")
DEFAULT_PUBLIC_URL = "http://127.0.0.1:8000"  # ``parkway up``'s API with its default ``--port``
HOME_MARKS = ("secret.key", "postgres")  # what a home that ``parkway up`` or ``parkway migrate`` used holds
DATABASE_SCHEMES = {"postgresql", "postgres"}  # with or without a driver: psycopg 3 is used either way
PLACEHOLDER_KEYS = {"change-me", "changeme", "secret", "please-change-me-to-a-long-random-string"}


def is_home(path: Path) -> bool:
    return any((path / mark).exists() for mark in HOME_MARKS)


def nearest_home(start: Path) -> Path | None:
    """``var`` of the nearest directory from ``start`` up that holds a Parkway home, as git finds ``.git``: a
    command run anywhere inside the project uses the project's home (``PARKWAY_HOME`` unset)."""
    return next((d / DEFAULT_HOME for d in (start, *start.parents) if is_home(d / DEFAULT_HOME)), None)


def environment(names: Iterable[str]) -> dict[str, str]:
    """The ``PARKWAY_*`` variables set for ``names`` (the settings' field names), by field name."""
    wanted = {f"{ENV_PREFIX}{name}".upper(): name for name in names}
    return {wanted[key.upper()]: value for key, value in os.environ.items() if key.upper() in wanted}


class Settings(BaseModel):
    """Configuration of Parkway. Unset database and broker mean the embedded default. Each field is read from
    ``PARKWAY_<FIELD>`` (what is passed to the constructor wins), and validated as a pydantic model field."""

    model_config = ConfigDict(extra="ignore", validate_default=True)

    database_url: str = ""
    broker_url: str = ""
    imports: str = "examples"  # the shipped example workflows, when PARKWAY_IMPORTS is not set
    secret_key: str = ""
    sweep_interval_s: float = Field(default=5.0, gt=0)
    sweep_batch: int = Field(default=500, gt=0)
    claim_lease_s: float = Field(default=30.0, gt=0)
    reenqueue_after_s: float = Field(default=10.0, ge=0)
    max_attempts: int = Field(default=5, ge=1)
    # How long no live worker may advertise a version before the work on it fails closed (a rolling deploy).
    version_grace_s: float = Field(default=600.0, ge=0)
    # A link from a run page's event to its trace: a template such as https://jaeger.example/trace/{trace_id}.
    trace_url: str = ""
    # How a resume's span follows the wait it ends (docs/operations.md "Tracing"): link, or parent.
    trace_waits: str = "link"
    worker_heartbeat_s: float = Field(default=10.0, gt=0)  # a worker is live for 3 heartbeats after each
    # A remote worker (docs/worker-protocol.md) is live this long after each of its lease calls.
    remote_worker_ttl_s: float = Field(default=60.0, gt=0)
    # A push handler serves its keys this long after its registration and after each push it accepted.
    push_live_s: float = Field(default=7 * 86400.0, gt=0)
    db_pool_size: int = Field(default=10, ge=1, le=500)
    workspace_dir: str = ""  # empty: ``workspaces`` under ``home``
    home: str = Field(default_factory=lambda: str(nearest_home(Path.cwd()) or DEFAULT_HOME))
    crash_at: str = ""
    # Webhooks (docs/webhooks.md): CIDRs a URL may reach although private, the retry delays, the timeout.
    webhook_allowed_networks: str = ""
    webhook_retry_s: str = "5,300,1800,7200,18000,36000,36000"
    webhook_timeout_s: float = Field(default=15.0, gt=0)
    webhook_log_days: float = Field(default=30.0, gt=0)  # how long the delivery log keeps an attempt
    # Where people reach the API (its pages, approval links): every link Parkway hands out starts with it.
    # Unset: the API's own address (``parkway up`` sets it for its children; else the default of ``--port``).
    public_url: str = ""

    @model_validator(mode="before")
    @classmethod
    def _environment(cls, given: Any) -> Any:
        return {**environment(cls.model_fields), **given} if isinstance(given, dict) else given

    @field_validator("imports")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()

    @field_validator("webhook_allowed_networks")
    @classmethod
    def _networks(cls, value: str) -> str:
        for cidr in filter(None, (c.strip() for c in value.split(","))):
            ipaddress.ip_network(cidr, strict=False)  # a ValueError names the bad CIDR
        return value

    @field_validator("webhook_retry_s")
    @classmethod
    def _delays(cls, value: str) -> str:
        if any(d < 0 for d in _floats(value)):
            raise ValueError("webhook retry delays are seconds, none negative: 5,300,1800")
        return value

    @field_validator("trace_waits")
    @classmethod
    def _trace_waits(cls, value: str) -> str:
        value = value.strip().lower()
        if value not in ("link", "parent"):
            raise ValueError("a resume's span either links to the wait it ends or is its child: link or parent")
        return value

    @field_validator("public_url")
    @classmethod
    def _absolute(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if value and _scheme(value) not in ("http", "https"):
            raise ValueError("the public URL is where people reach the API: http(s)://host[:port][/path]")
        return value

    @property
    def public_base(self) -> str:
        """``PARKWAY_PUBLIC_URL`` without its trailing slash, or the API's default address: links start with it."""
        return self.public_url or DEFAULT_PUBLIC_URL

    @property
    def webhook_networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        cidrs = filter(None, (c.strip() for c in self.webhook_allowed_networks.split(",")))
        return [ipaddress.ip_network(cidr, strict=False) for cidr in cidrs]

    @property
    def webhook_retry_delays(self) -> list[float]:
        return _floats(self.webhook_retry_s)

    @field_validator("database_url")
    @classmethod
    def _postgresql(cls, value: str) -> str:
        value = value.strip()
        if value and _scheme(value) not in DATABASE_SCHEMES:
            raise ValueError("Parkway runs on PostgreSQL only: postgresql://user:password@host:5432/database")
        return value

    @field_validator("broker_url")
    @classmethod
    def _known_transport(cls, value: str) -> str:
        value = value.strip()
        if not value:
            return value
        from kombu.transport import TRANSPORT_ALIASES  # only when a broker is configured

        for url in filter(None, value.split(";")):  # Celery's failover list
            if _scheme(url) not in TRANSPORT_ALIASES:
                raise ValueError(
                    "not a broker URL: its scheme must be one kombu knows, such as redis, rediss, amqp or sentinel "
                    "(redis://host:6379/0)"
                )
        return value

    @property
    def embedded_database(self) -> bool:
        return not self.database_url

    @property
    def embedded_dir(self) -> Path | None:
        """The embedded PostgreSQL's data directory, or ``None`` when a database is configured."""
        return embedded.data_dir(self.home) if self.embedded_database else None

    @property
    def effective_database_url(self) -> str:
        """The configured database, or the embedded PostgreSQL under ``home`` (started now if it is not running)."""
        if self.database_url:
            return self.database_url
        return embedded.url(embedded.data_dir(self.home))

    @property
    def workspace(self) -> Path:
        """Where each run's directory (its projections, its tools' files) is: ``PARKWAY_WORKSPACE_DIR``, or
        ``workspaces`` in ``PARKWAY_HOME``, like everything else the defaults keep."""
        return Path(self.workspace_dir) if self.workspace_dir else Path(self.home) / "workspaces"

    @property
    def embedded_broker(self) -> str | None:
        """The broker the stack runs itself when ``PARKWAY_BROKER_URL`` is unset: ``valkey`` (the wheel is
        installed: Linux x86_64, macOS arm64), else ``filesystem``; ``None`` when a broker is configured."""
        if self.broker_url:
            return None
        return "valkey" if valkey.available() else "filesystem"

    @property
    def broker_folder(self) -> Path:
        """The filesystem broker's folder (only where the embedded Valkey has no wheel)."""
        return Path(self.home).resolve() / "broker"

    @property
    def effective_broker_url(self) -> str:
        if self.embedded_broker == "valkey":
            return valkey.url(self.home)
        return self.broker_url or "filesystem://"

    @property
    def filesystem_broker(self) -> bool:
        """Whether the broker is the filesystem one: the embedded default without Valkey, or chosen with
        ``PARKWAY_BROKER_URL=filesystem://`` (the suite's ``PARKWAY_TEST_BROKER=filesystem``)."""
        return self.effective_broker_url.startswith("filesystem://")

    @property
    def import_modules(self) -> list[str]:
        return [m.strip() for m in self.imports.split(",") if m.strip()]

    def imports_problem(self) -> str | None:
        """Which module of ``PARKWAY_IMPORTS`` cannot be found (a typo, or not on the path), or ``None``; an
        error inside a module that exists is left to its import, which shows where it is."""
        import importlib.util

        for module in self.import_modules:
            try:
                found = importlib.util.find_spec(module) is not None
            except ModuleNotFoundError:  # a parent package is missing
                found = False
            if not found:
                return f"PARKWAY_IMPORTS names {module!r}, and no such module can be imported from here"
        return None

    def require_imports(self) -> None:
        """Raise ``ConfigError`` with ``imports_problem``: a command needing the workflow modules refuses as
        the worker, beat and API do, in one line, before it starts anything."""
        problem = self.imports_problem()
        if problem is not None:
            raise ConfigError(f"refusing to start: {problem}")

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


KEY_FILE_MIN_CHARS = 32


def _embedded_key(path: Path) -> str:
    """The embedded default's key: read from ``path``, or made there once. The file appears whole or not
    at all (a 0600 temporary file in the same directory, fsync, then ``os.link`` to the name: two
    processes starting at once agree on whichever link came first). An empty or short file is refused,
    never silently made again over: data sealed with the key it held would be lost."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        _create_key_file(path)
    return _read_key_file(path)


def _create_key_file(path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.write(fd, (secrets.token_urlsafe(48) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # unlike rename, never replaces a key another process made meanwhile
        except FileExistsError:
            return
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _read_key_file(path: Path) -> str:
    try:
        key = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"the key file {path} cannot be read: {exc}") from exc
    if len(key) < KEY_FILE_MIN_CHARS:
        what = "is empty" if not key else f"holds {len(key)} characters, fewer than {KEY_FILE_MIN_CHARS}"
        raise ConfigError(
            f"the key file {path} {what}; it is not made again over an existing file (what was sealed with "
            "its key would be lost): restore it from a backup, or delete it to make a new key, "
            "or set PARKWAY_SECRET_KEY"
        )
    return key


def _scheme(url: str) -> str:
    """``redis`` of ``redis://…``, ``postgresql`` of ``postgresql+psycopg://…``; empty without ``://``."""
    scheme, found, _ = url.strip().partition("://")
    return scheme.split("+", 1)[0].lower() if found else ""


def _floats(value: str) -> list[float]:
    return [float(d) for d in value.split(",") if d.strip()]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        raise ConfigError(settings_problem(exc)) from None


def settings_problem(exc: ValidationError) -> str:
    """Each refused setting by its variable's name and why, never its value (a URL may hold a password)."""
    refused = [f"PARKWAY_{'_'.join(str(p) for p in error['loc']).upper()}: {error['msg']}" for error in exc.errors()]
    return "invalid settings: " + "; ".join(refused)


def reset_settings() -> None:
    """Forget the cached settings (tests and the CLI change the environment)."""
    get_settings.cache_clear()
