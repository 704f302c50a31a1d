"""docker-compose.yml (issue 7, part 2), checked without a Docker engine.

Every Parkway service must run an entry point the suite itself runs (same program, same subcommand, no
option the suite never passes), every ``PARKWAY_*`` name it is given must be a setting, and the production
facts of CELERY-NOTES.md must hold: Redis persistent and never evicting, one beat, warm worker shutdown,
healthchecks behind every ``service_healthy``, Flower behind basic auth.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from sqlalchemy.engine import make_url

from parkway.children import OUTBOUND_QUEUES, WORK_QUEUES
from parkway.errors import ConfigError
from parkway.placeholders import is_placeholder, placeholder_problems
from parkway.settings import ENV_PREFIX, Settings
from tasks.celery_app import CONTINUATIONS_QUEUE, PUSH_QUEUE, STEPS_QUEUE, SWEEP_QUEUE, WEBHOOKS_QUEUE
from tasks.celery_app import app as celery_app
from tests.deploy.flower import flower_command
from tests.support import ROOT, Stack

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
APP_SERVICES = ("migrate", "api", "worker", "outbound", "beat", "flower")
QUEUES = {STEPS_QUEUE, CONTINUATIONS_QUEUE, SWEEP_QUEUE, WEBHOOKS_QUEUE, PUSH_QUEUE}
# Options whose value is where a process listens, who may log in, or how much it logs (the suite's beat logs at
# debug to see its sends, which are DEBUG lines in a quiet log): the deployment's to choose.
PER_DEPLOYMENT = {"--host", "--port", "--address", "--basic-auth", "-l"}
# What `parkway up` gives a child in its environment instead (FLOWER_BASIC_AUTH: never on a command line).
IN_ENVIRONMENT = {"--basic-auth"}


def env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines, as Docker Compose reads an env file (comments and blank lines skipped)."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


ENV_EXAMPLE = env_file(ROOT / ".env.example")


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}`` and ``${NAME:?error}``, from ``variables`` (its .env)."""

    def one(match: re.Match[str]) -> str:
        name, how, rest = match.group(1), match.group(2), match.group(3)
        value = variables.get(name, "")
        if how == ":?" and not value:
            raise AssertionError(f"compose would refuse to start: {rest}")
        return value or (rest if how == ":-" else "")

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:[-?])([^}]*))?\}", one, value)


APP_ENVIRONMENT: dict[str, str] = COMPOSE["x-app"]["environment"]
# What the app containers get from the env file, with the variables docker-compose.yml sets from it.
STACK_ENV = {**ENV_EXAMPLE, **{name: interpolate(value, ENV_EXAMPLE) for name, value in APP_ENVIRONMENT.items()}}


def argv(service: str) -> list[str]:
    command = SERVICES[service]["command"]
    assert isinstance(command, list), f"{service}: use the exec form, so signals reach the process itself"
    return [str(part) for part in command]


def console_scripts() -> dict[str, str]:
    """Module → console script, from pyproject.toml (``python -m parkway.cli`` is ``parkway``)."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    return {target.partition(":")[0]: name for name, target in scripts.items()}


# The celery command of the suite and of parkway up (parkway/cli_celery.py) is celery's own
# ``main`` without other packages' plugged subcommands: the same program, subcommands and options as the
# ``celery`` script a container runs.
SUITE_ALIASES = {"parkway.cli_celery": "celery"}


def as_installed(command: list[str]) -> list[str]:
    """``<python> -m celery …`` → ``celery …``: the form a container runs the same entry point in."""
    if command[0] == sys.executable and command[1] == "-m":
        module = SUITE_ALIASES.get(command[2], command[2])
        return [console_scripts().get(module, module), *command[3:]]
    return command


def parse(command: list[str]) -> tuple[str, list[str], dict[str, str | bool]]:
    """(program, positional arguments, options); ``--opt=v``, ``--opt v`` and bare flags."""
    program, rest = command[0], command[1:]
    positional: list[str] = []
    options: dict[str, str | bool] = {}
    i = 0
    while i < len(rest):
        token = rest[i]
        if token.startswith("-"):
            name, eq, value = token.partition("=")
            if eq:
                options[name] = value
            elif i + 1 < len(rest) and not rest[i + 1].startswith("-"):
                options[name] = rest[i + 1]
                i += 1
            else:
                options[name] = True
        else:
            positional.append(token)
        i += 1
    return program, positional, options


def role(command: list[str]) -> str:
    """Which compose service a command is: ``api`` for uvicorn, ``outbound`` for a worker on the outbound
    queues alone, else Celery's or parkway's subcommand."""
    program, positional, options = parse(command)
    if program == "uvicorn":
        return "api"
    if positional[:1] == ["worker"] and options.get("-Q") == OUTBOUND_QUEUES:
        return "outbound"
    return positional[0] if program in ("celery", "parkway") and positional else program


class Recorder:
    """Stands in for ``subprocess.Popen``/``run``: records the command, is a process that already exited."""

    commands: list[list[str]]

    def __init__(self, args: list[str], **_: Any) -> None:
        Recorder.commands.append([str(a) for a in args])
        self.pid, self.returncode, self.stdout, self.stderr = 0, 0, "", ""

    def poll(self) -> int:
        return 0

    def wait(self, timeout: float | None = None) -> int:
        return 0

    def send_signal(self, _: int) -> None: ...

    def kill(self) -> None: ...


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    Recorder.commands = []
    monkeypatch.setattr(subprocess, "Popen", Recorder)
    monkeypatch.setattr(subprocess, "run", Recorder)
    return Recorder.commands


@pytest.fixture
def suite_commands(recorded: list[list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The commands the suite starts its processes with, taken from the helpers that start them (as fresh
    processes: the fork server, tests/forkserver.py, runs the same modules with the same arguments)."""
    import tests.support
    from tests.api.conftest import ApiServer

    monkeypatch.setattr(tests.support, "FORK_WORKERS", False)  # the one switch every helper reads

    unused = "postgresql+psycopg://nobody@127.0.0.1:1/none"  # no process is started: Popen is a recorder
    stack = Stack(broker="filesystem", database_url=unused, broker_url="", home=tmp_path, logs=tmp_path)
    stack.start_worker(wait=False, queues=WORK_QUEUES)  # as tests/acceptance/test_outbound.py runs them
    stack.start_worker(wait=False, queues=OUTBOUND_QUEUES)
    stack.start_beat()
    stack.parkway("migrate")
    ApiServer(database_url=unused, log=tmp_path / "api.log").start(wait=False)
    commands = [as_installed(command) for command in recorded]
    commands.append(as_installed(flower_command(5555, "user:password")))
    return {role(command): command for command in commands}


@pytest.fixture
def parkway_up_commands(recorded: list[list[str]], monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The commands ``parkway up`` starts its children with (they 'exit' at once, so it returns)."""
    import parkway.cli
    import parkway.cli_up
    from parkway.settings import reset_settings

    monkeypatch.setattr(parkway.cli_up, "cmd_migrate", lambda _: 0)
    monkeypatch.setattr(parkway.cli_up.cli_bootstrap, "welcome", lambda _: [])  # no database behind it here
    # A configured database, so that `up` starts no embedded PostgreSQL (Popen is a recorder here)
    previous = os.environ.get("PARKWAY_DATABASE_URL")
    os.environ["PARKWAY_DATABASE_URL"] = "postgresql+psycopg://nobody@127.0.0.1:1/none"
    reset_settings()
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        args = parkway.cli.build_parser().parse_args(["up", "--grace", "0.1"])
        args.fn(args)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        if previous is None:
            os.environ.pop("PARKWAY_DATABASE_URL")
        else:
            os.environ["PARKWAY_DATABASE_URL"] = previous
        reset_settings()
    commands = [as_installed(command) for command in recorded]
    return {role(command): command for command in commands}


def assert_same_entry_point(service: str, suite: list[str], source: str) -> None:
    program, positional, options = parse(argv(service))
    suite_program, suite_positional, suite_options = parse(suite)
    assert (program, positional) == (suite_program, suite_positional), f"{service} vs {source}: {suite}"
    for name, value in options.items():
        assert name in suite_options, f"{service} passes {name}, which {source} never does: {suite}"
        if name not in PER_DEPLOYMENT:
            assert value == suite_options[name], f"{service}: {name}={value}, {source}: {suite_options[name]}"


# --------------------------------------------------------------------------- commands


def test_compose__has_the_services_of_the_stack() -> None:
    assert set(SERVICES) == {"postgres", "redis", *APP_SERVICES}


@pytest.mark.parametrize("service", APP_SERVICES)
def test_compose__each_app_service_runs_an_entry_point_the_suite_runs(
    service: str, suite_commands: dict[str, list[str]]
) -> None:
    assert_same_entry_point(service, suite_commands[service], "the test suite")


def test_compose__services_parkway_up_also_runs_use_its_entry_points(
    parkway_up_commands: dict[str, list[str]],
) -> None:
    assert {"api", "worker", "outbound", "beat"} <= set(parkway_up_commands)
    for service in set(APP_SERVICES) & set(parkway_up_commands):
        assert_same_entry_point(service, parkway_up_commands[service], "parkway up")
        assert not IN_ENVIRONMENT & set(parse(parkway_up_commands[service])[2]), parkway_up_commands[service]


def test_compose__migrate_is_the_parkway_migrate_command() -> None:
    import parkway.cli

    assert argv("migrate") == ["parkway", "migrate"]
    assert console_scripts()["parkway.cli"] == "parkway"
    assert parkway.cli.build_parser().parse_args(["migrate"]).fn is parkway.cli.cmd_migrate


def test_compose__the_workers_consume_the_named_queues_between_them_and_beat_stays_out_of_them() -> None:
    consumed = {service: set(str(parse(argv(service))[2]["-Q"]).split(",")) for service in ("worker", "outbound")}
    assert consumed == {
        "worker": {STEPS_QUEUE, CONTINUATIONS_QUEUE, SWEEP_QUEUE},
        "outbound": {WEBHOOKS_QUEUE, PUSH_QUEUE},
    }
    assert {queue.name for queue in celery_app.conf.task_queues} == QUEUES
    for service in consumed:
        assert not {"-B", "--beat"} & set(parse(argv(service))[2]), "an embedded beat would be a second scheduler"


# --------------------------------------------------------------------------- environment


def stack_settings(**changes: str) -> Settings:
    values = {
        name.removeprefix("PARKWAY_").lower(): value for name, value in STACK_ENV.items() if name.startswith("PARKWAY_")
    }
    return Settings.model_validate({**values, **changes})


def test_env_example__every_parkway_name_is_a_setting() -> None:
    assert ENV_PREFIX == "PARKWAY_"  # each setting is read from PARKWAY_<ITS NAME>
    settings = {f"PARKWAY_{name.upper()}" for name in Settings.model_fields}
    names = {name for name in STACK_ENV if name.startswith("PARKWAY_")}
    assert names - settings == set()
    required = {"PARKWAY_DATABASE_URL", "PARKWAY_BROKER_URL", "PARKWAY_SECRET_KEY", "PARKWAY_IMPORTS"}
    assert required <= names
    assert "examples" in stack_settings().import_modules  # the example workflows, as `make run` loads them


def test_env_example__values_parse_and_the_placeholder_key_is_refused() -> None:
    settings = stack_settings()
    with pytest.raises(ConfigError):
        settings.resolved_secret_key()
    real_key = "r" * 48
    assert stack_settings(secret_key=real_key).resolved_secret_key() == real_key


def test_env_example__the_password_and_the_key_are_placeholders_migrate_refuses() -> None:
    settings = stack_settings()
    database = make_url(settings.database_url)
    assert is_placeholder(ENV_EXAMPLE["POSTGRES_PASSWORD"]) and is_placeholder(ENV_EXAMPLE["PARKWAY_SECRET_KEY"])
    assert len(placeholder_problems(database, settings)) == 2
    chosen = {"POSTGRES_PASSWORD": "s3cret-Pa55word", "PARKWAY_SECRET_KEY": "k" * 48}
    real = {name: interpolate(value, {**ENV_EXAMPLE, **chosen}) for name, value in APP_ENVIRONMENT.items()}
    assert placeholder_problems(make_url(real["PARKWAY_DATABASE_URL"]), stack_settings(secret_key="k" * 48)) == []


def test_env_example__points_at_the_compose_postgres_and_redis() -> None:
    database = make_url(STACK_ENV["PARKWAY_DATABASE_URL"])
    postgres = {
        name: interpolate(str(value), ENV_EXAMPLE) for name, value in SERVICES["postgres"]["environment"].items()
    }
    assert database.drivername == "postgresql+psycopg"
    assert (database.host, database.port) == ("postgres", 5432)
    # One password, read from the env file by both: PostgreSQL's and the one the app connects with
    assert "${POSTGRES_PASSWORD:?" in SERVICES["postgres"]["environment"]["POSTGRES_PASSWORD"]
    assert "${POSTGRES_PASSWORD:?" in APP_ENVIRONMENT["PARKWAY_DATABASE_URL"]
    assert (database.username, database.password, database.database) == (
        postgres["POSTGRES_USER"],
        postgres["POSTGRES_PASSWORD"],
        postgres["POSTGRES_DB"],
    )
    broker = urlsplit(STACK_ENV["PARKWAY_BROKER_URL"])
    assert (broker.scheme, broker.hostname, broker.port) == ("redis", "redis", 6379)


def test_compose__publishes_the_api_metrics_and_flower_on_127_0_0_1_by_default() -> None:
    published = {service: spec["ports"] for service, spec in SERVICES.items() if spec.get("ports")}
    assert set(published) == {"api", "flower"}  # /metrics is the API's own route, on its port
    for variables in ({}, ENV_EXAMPLE):  # no .env at all, and the one copied from .env.example
        bound = {service: [interpolate(str(port), variables) for port in ports] for service, ports in published.items()}
        assert bound == {"api": ["127.0.0.1:8000:8000"], "flower": ["127.0.0.1:5555:5555"]}, variables
    from api.app import app as api

    assert "/metrics" in api.openapi()["paths"]


def test_migrate__refuses_to_run_with_the_env_example_placeholders(stack: Stack) -> None:
    with_placeholder_password = make_url(stack.database_url).set(password=ENV_EXAMPLE["POSTGRES_PASSWORD"])
    url = with_placeholder_password.render_as_string(hide_password=False)
    for env in ({"PARKWAY_DATABASE_URL": url}, {"PARKWAY_SECRET_KEY": ENV_EXAMPLE["PARKWAY_SECRET_KEY"]}):
        done = stack.parkway("migrate", **env)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "placeholder" in done.stderr and "change-me" in done.stderr, done.stderr
        assert "parkway migrate:" in done.stderr and "Traceback" not in done.stderr
    assert stack.parkway("migrate").returncode == 0


def test_compose__app_services_share_one_image_and_take_env_from_env_example() -> None:
    builds = {str(SERVICES[service]["build"]) for service in APP_SERVICES}
    images = {SERVICES[service]["image"] for service in APP_SERVICES}
    assert builds == {"."} and len(images) == 1
    for service in APP_SERVICES:
        files = [entry["path"] if isinstance(entry, dict) else entry for entry in SERVICES[service]["env_file"]]
        assert files[0] == ".env.example", service
        # Only what is built from the env file's values (the database URL, from POSTGRES_PASSWORD)
        # (and Flower's login, kept off its command line)
        environment = {k: v for k, v in SERVICES[service]["environment"].items() if k != "FLOWER_BASIC_AUTH"}
        assert environment == APP_ENVIRONMENT, f"{service}: configure through .env.example"
    assert set(APP_ENVIRONMENT) == {"PARKWAY_DATABASE_URL"}


def test_compose__every_interpolated_variable_is_documented_in_env_example() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    variables = set(re.findall(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)", text))
    assert variables <= set(ENV_EXAMPLE)


def test_compose__workspaces_are_a_volume_shared_by_every_process_that_ends_runs() -> None:
    workspace = ENV_EXAMPLE["PARKWAY_WORKSPACE_DIR"]
    for service in ("api", "worker", "outbound"):  # outbound: a push handler's outcome may end its run
        targets = {mount.split(":")[1] for mount in SERVICES[service]["volumes"]}
        assert workspace in targets, service


# --------------------------------------------------------------------------- production facts


def test_compose__beat_has_exactly_one_replica() -> None:
    assert SERVICES["beat"]["deploy"]["replicas"] == 1
    assert "scale" not in SERVICES["beat"]


def test_compose__redis_keeps_an_append_only_file_and_never_evicts() -> None:
    command = SERVICES["redis"]["command"]
    assert SERVICES["redis"]["image"].startswith("redis:7")
    options = parse(command)[2]
    assert options["--appendonly"] == "yes"
    assert options["--maxmemory-policy"] == "noeviction"
    assert any(mount.endswith(":/data") for mount in SERVICES["redis"]["volumes"])


def test_compose__dependencies_wait_for_health_or_successful_completion() -> None:
    for service, spec in SERVICES.items():
        for dependency, how in spec.get("depends_on", {}).items():
            condition = how["condition"]
            assert condition in ("service_healthy", "service_completed_successfully"), (service, dependency)
            if condition == "service_healthy":
                assert "healthcheck" in SERVICES[dependency], f"{service} waits on {dependency}'s health"
            else:
                assert SERVICES[dependency].get("restart") == "no", f"{dependency} must be one-shot"
    assert SERVICES["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for service in ("api", "worker", "outbound", "beat"):
        depends = SERVICES[service]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully", service
        assert depends["redis"]["condition"] == "service_healthy", service
    assert SERVICES["flower"]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_compose__postgres_redis_and_api_have_healthchecks() -> None:
    def probe(service: str) -> list[str]:
        test = SERVICES[service]["healthcheck"]["test"]
        assert test[0] in ("CMD", "CMD-SHELL"), service
        return [str(part) for part in test[1:]]

    assert probe("postgres")[0] == "pg_isready"
    assert probe("redis") == ["redis-cli", "ping"]
    assert "http://127.0.0.1:8000/healthz" in " ".join(probe("api"))
    assert "/healthcheck" in " ".join(probe("flower"))
    from api.app import app as api

    assert "get" in api.openapi()["paths"]["/healthz"]


@pytest.mark.parametrize("service", ["worker", "outbound"])
def test_compose__workers_stop_warm_on_sigterm_with_a_grace_period(service: str) -> None:
    worker = SERVICES[service]
    assert worker["stop_signal"] == "SIGTERM"
    assert seconds(worker["stop_grace_period"]) >= 60


def test_compose__flower_needs_basic_auth_and_keeps_no_state_file() -> None:
    _, positional, options = parse(argv("flower"))
    assert positional == ["flower"]
    # Compose refuses to start while the credentials are unset (never an open Flower); Flower reads them from
    # its environment, never from its command line.
    assert not IN_ENVIRONMENT & set(options)
    assert re.fullmatch(r"\$\{FLOWER_BASIC_AUTH:\?[^}]+\}", str(SERVICES["flower"]["environment"]["FLOWER_BASIC_AUTH"]))
    assert options["--persistent"] == "False"
    assert options["--port"] == "5555"
    assert [str(port).rpartition("}:")[2] for port in SERVICES["flower"]["ports"]] == ["5555:5555"]


def test_dockerfile__installs_the_package_as_a_non_root_user() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    instructions = [line.split(None, 1) for line in dockerfile.splitlines() if line and line[0].isupper()]
    assert instructions[0] == ["FROM", "python:3.11-slim"]
    assert 'pip install ".[otel]"' in dockerfile  # the package, with its tracing extra (docs/operations.md)
    users = [rest.strip() for keyword, rest in instructions if keyword == "USER"]
    assert users and users[-1] not in ("root", "0")
    copied = {source for keyword, rest in instructions if keyword == "COPY" for source in rest.split()[:-1]}
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    for package in packages["find"]["include"]:
        assert package.rstrip("*") in copied, f"the image would be built without {package}"
    for path in copied:
        assert (ROOT / path).exists(), path


def seconds(duration: str | int) -> float:
    """A Compose duration (``90s``, ``2m``, ``1m30s``) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    if isinstance(duration, int):
        return float(duration)
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|m|s)", duration)
    assert "".join(number + unit for number, unit in parts) == duration, duration
    return sum(float(number) * units[unit] for number, unit in parts)
