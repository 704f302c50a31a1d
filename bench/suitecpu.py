"""The CPU a command and every process it starts spend, by kind of process (issue 43 item 9: the suite's CPU).

    python -m bench.suitecpu [--every 0.1] [--out FILE.json] -- COMMAND ARGS...

Runs ``COMMAND`` and samples ``/proc`` every ``--every`` seconds: each process whose parent is the command or
one of the processes already seen is counted (a worker's pool children too, and an embedded PostgreSQL with
its backends, while ``pg_ctl`` still waits for it), its last-seen user + system time put under a kind read
from its command line (celery worker, beat, the API server, a ``parkway`` command, PostgreSQL, node, pytest,
other). A process that lives less than one sampling interval is missed, and each process's last interval
before it exits too: the figures are a floor, for comparing kinds and runs, not an exact account.
"""

from __future__ import annotations

import json
import os
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


def measure(command: list[str], every: float) -> dict[str, object]:
    started = time.monotonic()
    proc = subprocess.Popen(command)
    seen: dict[int, tuple[str, float]] = {proc.pid: (kind_of(" ".join(command)), 0.0)}
    while proc.poll() is None:
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
