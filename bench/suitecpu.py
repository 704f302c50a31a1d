"""The CPU a command and every process it starts spend, by kind of process (issue 43 item 9: the suite's CPU).

    python -m bench.suitecpu [--every 0.1] [--out FILE.json] -- COMMAND ARGS...

Runs ``COMMAND`` and samples ``/proc`` every ``--every`` seconds: each process whose parent is the command or
one of the processes already seen is counted (a worker's pool children too, and an embedded PostgreSQL with
its backends, while ``pg_ctl`` still waits for it), its last-seen user + system time put under a kind read
from its command line (celery worker, beat, the API server, a ``parkway`` command, PostgreSQL, node, pytest,
other). A process that lives less than one sampling interval is missed, and each process's last interval
before it exits too: the figures are a floor, for comparing kinds and runs, not an exact account.

The backends of a PostgreSQL server that is not the command's child (the suite's default, 127.0.0.1:5432) are
counted too, as "postgres backend": each backend whose client socket (the port in its process title) is held
by one of the command's processes, so other sessions' backends on the same server are left out.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
KINDS = (
    ("celery worker", ("celery", " worker")),
    ("celery beat", ("celery", " beat")),
    ("parkway up", ("parkway.cli up",)),
    ("api server", ("uvicorn",)),
    ("api server", ("api.app",)),
    ("parkway command", ("parkway.cli",)),
    ("parkway command", ("bin/parkway",)),
    ("postgres", ("postgres",)),
    ("valkey/redis", ("valkey",)),
    ("node", ("node",)),
    ("pytest", ("pytest",)),
    ("python -c", ("python -c",)),
    ("python -c", ("python3 -c",)),
)


def kind_of(cmdline: str) -> str:
    for kind, needles in KINDS:
        if all(needle in cmdline for needle in needles):
            return kind
    return "other: " + (cmdline.split()[0].rsplit("/", 1)[-1] if cmdline else "?")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system seconds) of a process, or ``None`` once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


CLIENT_PORT = re.compile(r"127\.0\.0\.1\((\d+)\)")
BACKEND = "postgres backend"


def _socket_inodes(ports: set[int]) -> dict[str, int]:
    """The socket inode of each local TCP port in ``ports`` (IPv4), by inode."""
    found: dict[str, int] = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        port = int(fields[1].rsplit(":", 1)[1], 16)
        if port in ports:
            found[fields[9]] = port
    return found


def _held_ports(pids: list[int], inodes: dict[str, int]) -> set[int]:
    """Which of the sockets in ``inodes`` one of ``pids`` holds open (their local ports)."""
    held: set[int] = set()
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        held |= {inodes[link[8:-1]] for link in links if link.startswith("socket:[") and link[8:-1] in inodes}
    return held


def _foreign_backends(seen: dict[int, tuple[str, float]], unknown: set[int], backends: dict[int, int]) -> None:
    """Count, in ``seen``, the backends (``backends``: pid by client port) whose client is a seen process; the
    rest go to ``unknown`` (never looked at again)."""
    inodes = _socket_inodes(set(backends))
    ours = _held_ports([pid for pid, (kind, _) in seen.items() if kind != BACKEND], inodes) if inodes else set()
    for port, pid in backends.items():
        if port in ours:
            stat = _stat(pid)
            seen[pid] = (BACKEND, stat[1] if stat else 0.0)
        else:
            unknown.add(pid)


def measure(command: list[str], every: float) -> dict[str, object]:
    started = time.monotonic()
    proc = subprocess.Popen(command)
    seen: dict[int, tuple[str, float]] = {proc.pid: (kind_of(" ".join(command)), 0.0)}
    unknown: set[int] = set()  # other sessions' backends, and processes that are no backend
    while proc.poll() is None:
        backends: dict[int, int] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            stat = _stat(pid)
            if stat is None:
                continue
            parent, cpu = stat
            if pid in seen:
                seen[pid] = (seen[pid][0], max(cpu, seen[pid][1]))
            elif parent in seen:
                seen[pid] = (kind_of(_cmdline(pid)), cpu)
            elif pid not in unknown:
                title = _cmdline(pid)
                client = CLIENT_PORT.search(title) if title.startswith("postgres:") else None
                if client:
                    backends[int(client.group(1))] = pid
                elif title.startswith("postgres:"):  # a server's own process, never a client's backend
                    unknown.add(pid)
        if backends:
            _foreign_backends(seen, unknown, backends)
        time.sleep(every)
    wall = time.monotonic() - started
    by_kind: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for kind, cpu in seen.values():
        by_kind[kind] += cpu
        count[kind] += 1
    return {
        "command": command,
        "returncode": proc.returncode,
        "wall_s": round(wall, 1),
        "cpu_s": round(sum(by_kind.values()), 1),
        "kinds": {kind: {"processes": count[kind], "cpu_s": round(cpu, 1)} for kind, cpu in by_kind.most_common()},
    }


def main(argv: list[str]) -> int:
    every, out = 0.1, None
    while argv and argv[0] != "--":
        flag, value, *argv = argv
        if flag == "--every":
            every = float(value)
        elif flag == "--out":
            out = Path(value)
        else:
            raise SystemExit(__doc__)
    if not argv[1:]:
        raise SystemExit(__doc__)
    result = measure(argv[1:], every)
    text = json.dumps(result, indent=1)
    print(text, file=sys.stderr)
    if out:
        out.write_text(text)
    return 0 if result["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
