"""``parkway up``: the whole stack on this machine, and ``parkway logs``, which shows what its children said.

The console shows ``parkway up``'s own lines only: its progress, the workflows it loaded, the tokens of a
first start (once), the URLs, and a child's restart. Each child's output goes to its file under
``<PARKWAY_HOME>/logs`` (``parkway.logfiles``)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from parkway import cli_bootstrap, cli_check, embedded, logfiles, valkey
from parkway.children import (
    OUTBOUND_QUEUES,
    WORK_QUEUES,
    Child,
    child_environment,
    http_problem,
    stop_children,
    stop_signals,
)
from parkway.cli_celery import STATELESS_FLOWER
from parkway.cli_migrate import cmd_migrate, database_shown
from parkway.errors import ConfigError
from parkway.locks import hold_for_life
from parkway.supervisor import RestartPolicy, Supervisor, exit_text

if TYPE_CHECKING:
    from parkway.settings import Settings

API_LISTENING = "Uvicorn running on"  # uvicorn's line once its socket is bound
FLOWER_LISTENING = "Visit me at"  # Flower's, likewise


def _local(host: str) -> str:
    """Where to reach a server bound to ``host`` from this machine."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _where(settings: Settings) -> str:
    from kombu.utils.url import maybe_sanitize_url

    if settings.embedded_broker == "valkey":
        broker = valkey.describe(settings.home)
    elif settings.embedded_broker == "filesystem":
        broker = f"filesystem broker ({settings.broker_folder}; no embedded Valkey on this platform)"
    else:
        broker = str(maybe_sanitize_url(settings.broker_url))
    return f"{database_shown(settings)} + {broker}"


def _only_up_in(home: Path) -> None:
    """Hold ``home``'s ``up.lock`` for as long as this process lives, or refuse: a second ``parkway up`` on
    one home would run a second worker and beat on its database and serve nothing of its own."""
    holder = hold_for_life(home / "up.lock", str(os.getpid()))
    if holder is not None:
        raise ConfigError(
            f"another parkway up (pid {holder}) is running in {home}: stop it first, or give this one a "
            "PARKWAY_HOME of its own"
        )


def loaded_workflows(settings: Settings) -> str:
    """What the worker will run: the steps (a workflow is its first step) and continuation versions that
    ``PARKWAY_IMPORTS`` registers, imported here as the worker imports them."""
    from tasks import registry

    registry.import_workflows()
    steps = ", ".join(sorted(registry.keys("start"))) or "none"
    continuations = ", ".join(sorted(registry.keys("resume"))) or "none"
    return f"workflows from PARKWAY_IMPORTS={settings.imports}: steps {steps}; continuations {continuations}"


def _commands(
    args: argparse.Namespace, env: dict[str, str], flower_auth: str | None
) -> dict[str, tuple[list[str], Sequence[str], dict[str, str]]]:
    """Each child's command line, the markers it prints once ready, and its environment."""
    py = sys.executable
    # celery's own command, without the subcommands the child does not run (parkway/cli_celery.py)
    celery = [py, "-m", "parkway.cli_celery", "-A", "tasks.celery_app:app"]
    commands: dict[str, tuple[list[str], Sequence[str], dict[str, str]]] = {}
    commands["api"] = ([py, "-m", "uvicorn", "api.app:app", "--host", args.host, "--port", str(args.port),
                        "--timeout-graceful-shutdown", "5"], [API_LISTENING], env)  # fmt: skip
    for name, queues in (("worker", WORK_QUEUES), ("outbound", OUTBOUND_QUEUES)):
        commands[name] = ([*celery, "worker", "-l", "info", "-c", str(args.concurrency), "-n", f"{name}@%h",
                           "-Q", queues], [" ready."], env)  # fmt: skip
    commands["beat"] = ([*celery, "beat", "-l", "info"], ["beat: Starting"], env)
    if flower_auth is not None:
        # Never an open Flower, and its login never on a command line (ps shows those): Flower reads it
        # from FLOWER_BASIC_AUTH in its environment.
        commands["flower"] = (
            [*celery, "flower", "--address=127.0.0.1", f"--port={args.flower_port}", STATELESS_FLOWER,
             "--inspect_timeout=10000"],
            [FLOWER_LISTENING],
            {**env, "FLOWER_BASIC_AUTH": flower_auth},
        )  # fmt: skip
    return commands


def cmd_up(args: argparse.Namespace) -> int:
    """Migrate, then run the embedded broker, API, worker, outbound worker, beat and Flower until Ctrl-C /
    SIGTERM, restarting a child that dies (until one dies too often)."""
    from parkway.settings import get_settings

    if args.flower:  # a value in the environment, refused before anything slower is done
        cli_bootstrap.require_usable_flower_login()
    settings = get_settings()
    home = Path(settings.home).resolve()
    _only_up_in(home)  # a second up on this home refuses at once, before the workflows are imported
    settings.require_imports()  # now, not after migrating and starting the children that would refuse
    cli_check.refuse_dangling()  # likewise: what `parkway check` reports refuses the stack, its worker too
    settings.resolved_secret_key()  # refuse now, not in four children; makes the embedded key file once
    flower_login = cli_bootstrap.flower_login(home) if args.flower else None  # refused before anything starts

    def say(text: str) -> None:
        print(f"parkway up: {text}", flush=True)

    say(loaded_workflows(settings))  # an import error stops it here, naming the module
    embedded.start_for_process(settings.embedded_dir)  # shared by the children; stopped on exit if `up` started it
    cmd_migrate(args)
    for line in cli_bootstrap.welcome(settings):  # before any child can fail: tokens are shown only now
        say(line)
    if settings.embedded_broker == "valkey" and valkey.shut_down_leftover(home):
        say(f"shut down the {valkey.describe(home)} an earlier parkway up left running")
    env = child_environment()
    env["PARKWAY_HOME"] = str(home)
    api_url = f"http://{_local(args.host)}:{args.port}"
    shown_api = api_url if args.host in ("", "0.0.0.0", "::") else f"http://{args.host}:{args.port}"
    env.setdefault("PARKWAY_PUBLIC_URL", shown_api)  # the links deliveries and pages carry: this API's
    flower_url = f"http://127.0.0.1:{args.flower_port}"
    commands = _commands(args, env, flower_login[0] if flower_login else None)
    ready_lines = {
        "broker": f"broker ready: {valkey.describe(home)}",
        "api": f"api ready: {shown_api}  (docs {shown_api}/docs, OpenAPI {shown_api}/openapi.json)",
        "worker": f"worker ready: queues {WORK_QUEUES.replace(',', ', ')}",
        "outbound": f"outbound ready: queues {OUTBOUND_QUEUES.replace(',', ', ')} (webhook deliveries, pushes)",
        "beat": f"beat ready: recovery sweep every {settings.sweep_interval_s:g}s",
    }
    flower_where = ""
    if flower_login is not None:
        _, login, flower_where = flower_login
        ready_lines["flower"] = f"flower ready: {flower_url}  ({login})"
    children: dict[str, Child] = {}
    if settings.embedded_broker == "valkey":  # first: the others connect to it
        children["broker"] = Child("broker", valkey.command(home), env, log=logfiles.path(home, "broker"))
    children.update(
        (name, Child(name, cmd, child_env, watch=watch, log=logfiles.path(home, name)))
        for name, (cmd, watch, child_env) in commands.items()
    )

    def said(name: str, marker: str) -> str | None:
        return None if marker in children[name].seen else f"it has not said {marker!r} yet"

    ready_checks: dict[str, Callable[[], str | None]] = {
        "broker": lambda: valkey.problem(home),
        # Each server's own line first: the URL alone may be answered by another process on that port. The
        # API is ready when /readyz says so (its schema current, the broker reachable), not merely alive.
        "api": lambda: said("api", API_LISTENING) or http_problem(f"{api_url}/readyz"),
        "worker": lambda: said("worker", " ready."),
        "outbound": lambda: said("outbound", " ready."),
        "beat": lambda: said("beat", "beat: Starting"),
        "flower": lambda: said("flower", FLOWER_LISTENING) or http_problem(f"{flower_url}/healthcheck"),
    }
    stop = {"signum": 0, "count": 0}

    def on_signal(signum: int) -> None:
        stop["signum"] = stop["signum"] or signum
        stop["count"] += 1

    started = time.monotonic()
    with stop_signals(on_signal):
        print("parkway up: starting", end="", flush=True)
        for child in children.values():
            if stop["count"]:
                break
            child.start()
            if child.name == "broker":
                valkey.wait_until_answers(home, child.alive, give_up=lambda: stop["count"] > 0)
            print(f" {child.name} (pid {child.pid})…", end="", flush=True)
        print(flush=True)
        policy = RestartPolicy(limit=args.restarts, window_s=args.restart_window)
        supervisor = Supervisor(list(children.values()), ready_checks, ready_lines, stop, say, policy)
        announce = [
            *cli_bootstrap.urls(shown_api, flower_url if args.flower else None, flower_where),
            f"logs         {logfiles.directory(home)}  (parkway logs [{'|'.join(children)}])",
        ]
        code = supervisor.run(started=started, timeout=args.startup_timeout, where=_where(settings), announce=announce)
        codes = _stop(children, args, stop, say)
    left = [c.name for c in children.values() if c.group_alive()]
    if left:
        say(f"could not stop {', '.join(left)}")
        return 1
    say("stopped (" + ", ".join(f"{name} {exit_text(rc)}" for name, rc in codes.items()) + ")")
    return code


def _stop(
    children: dict[str, Child], args: argparse.Namespace, stop: dict[str, int], say: Callable[[str], None]
) -> dict[str, int | None]:
    """Stop the stack's processes, then its broker: a worker's warm shutdown still talks to it."""
    stack = [c for name, c in children.items() if name != "broker"]
    running = ", ".join(c.name for c in children.values() if c.alive())
    if running:
        say(f"stopping {running} (SIGTERM, up to {args.grace:g}s; Ctrl-C again to kill now)…")
    codes = stop_children(stack, grace_s=args.grace, say=say, hurry=lambda: stop["count"] > 1)
    if "broker" in children:
        codes.update(stop_children([children["broker"]], grace_s=args.grace, say=say))
    return codes


def cmd_logs(args: argparse.Namespace) -> int:
    """Print the last lines of one child's log (or of all, each line prefixed), then follow them."""
    from parkway.settings import get_settings

    home = Path(get_settings().home).resolve()
    names = [args.name] if args.name else [n for n in logfiles.NAMES if logfiles.path(home, n).exists()]
    if not names or not all(logfiles.path(home, n).exists() for n in names):
        what = args.name or "any child"
        print(f"parkway logs: no log of {what} in {logfiles.directory(home)} (has parkway up run with "
              "this PARKWAY_HOME?)", file=sys.stderr)  # fmt: skip
        return 1

    def write(line: str) -> None:
        print(line, flush=True)

    try:
        logfiles.show(home, names, lines=args.lines, follow=args.follow, write=write)
    except KeyboardInterrupt:
        return 0
    return 0


def add_commands(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    up = add_parser(
        "up",
        help="run the whole stack on this machine (broker, API, worker, outbound worker, beat, Flower)",
        description="Migrate, then run the embedded broker (unless PARKWAY_BROKER_URL is set), the API, a "
        "worker, an outbound worker (webhook deliveries and pushes), beat and Flower until Ctrl-C or SIGTERM. "
        "A child that dies is restarted (after 1s, 2s, 4s …) "
        "unless it was restarted --restarts times within --restart-window seconds: then everything stops, "
        "exit 1. On the first start of an empty embedded database it makes an admin, an agent and a human "
        "(granted on target 'example') and prints their tokens, only then. The console shows only parkway "
        "up's own lines (progress, the workflows loaded, tokens, URLs, restarts); each child's output goes to "
        "PARKWAY_HOME/logs/<name>.log (parkway logs).",
    )
    up.add_argument("--host", default="127.0.0.1", help="the API's address (default 127.0.0.1)")
    up.add_argument("--port", type=int, default=8000, help="the API's port (default 8000)")
    up.add_argument("--flower-port", type=int, default=5555, help="Flower's port on 127.0.0.1 (default 5555)")
    up.add_argument("--no-flower", dest="flower", action="store_false", help="do not start Flower")
    up.add_argument(
        "--concurrency", type=int, default=2, help="processes of the worker and of the outbound worker (default 2 each)"
    )
    up.add_argument("--grace", type=float, default=30.0, help="seconds children get to stop after SIGTERM (30)")
    up.add_argument("--restarts", type=int, default=5, help="restarts of one child allowed within the window (5)")
    up.add_argument("--restart-window", type=float, default=60.0, help="the window of --restarts, seconds (60)")
    up.add_argument("--startup-timeout", type=float, default=60.0, help="seconds every child may take to be ready (60)")
    up.set_defaults(fn=cmd_up)
    logs = add_parser(
        "logs",
        help="print and follow the logs of parkway up's children",
        description="Print the last lines of a child's log under PARKWAY_HOME/logs, then follow it (Ctrl-C "
        "ends). Without a name: every child's log, each line prefixed with its name.",
    )
    logs.add_argument("name", nargs="?", choices=logfiles.NAMES, help="one child (default: all of them)")
    logs.add_argument("-n", "--lines", type=int, default=20, help="how many last lines to print first (20)")
    logs.add_argument("--no-follow", dest="follow", action="store_false", help="print them and exit")
    logs.set_defaults(fn=cmd_logs)
