"""How long the hot CLI commands take as whole processes (issue 43 item 3), against a running stack.

    PARKWAY_HOME=/path/to/home python -m bench.cli_times [--reps 10] [--parkway [NAME=]EXECUTABLE ...]

The stack is one ``parkway up`` made (its agent, principal ``agent``, holds a grant on target ``example``).
Each command runs ``--reps`` times as a fresh process (``subprocess.run``); each must exit 0. Several
``--parkway`` (e.g. ``before=…`` a wrapper running another checkout, ``after=.venv/bin/parkway``) run side by
side, interleaved, so the host's load touches each alike. Prints the median, minimum and maximum wall time of each and
its median CPU time (user + system: less moved by the host's load), in seconds, as a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

PAYLOAD = '{"service": "billing", "env": "staging"}'


def commands(tag: str, i: int) -> dict[str, list[str]]:
    return {
        "token create": ["token", "create", "--kind", "agent", "--name", f"bench-{tag}-{i}"],
        "grant create": ["grant", "create", "--principal", f"bench-{tag}-{i}", "--target", f"bench-{tag}"],
        "run start": ["run", "start", "deploy.plan", "--as", "agent", "--target", "example", "--payload", PAYLOAD],
        "workers": ["workers"],
    }


def timed(parkway: str, argv: list[str]) -> tuple[float, float]:
    """The command's wall time and its CPU time (user + system, its children's too), in seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([parkway, *argv], capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"parkway {' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return took, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def arguments(doc: str | None) -> tuple[int, dict[str, str]]:
    """``--reps`` and the ``--parkway`` executables by name (this interpreter's ``parkway`` when none)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--parkway", action="append", metavar="[NAME=]EXECUTABLE")
    args = parser.parse_args()
    if "PARKWAY_HOME" not in os.environ and "PARKWAY_DATABASE_URL" not in os.environ:
        raise SystemExit("set PARKWAY_HOME (or PARKWAY_DATABASE_URL) to the running stack's")
    given = args.parkway or [str(Path(sys.executable).with_name("parkway"))]
    return args.reps, dict(p.partition("=")[::2] if "=" in p else (p, p) for p in given)


def main() -> int:
    reps, executables = arguments(__doc__)
    tag = uuid.uuid4().hex[:8]
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for i in range(reps):  # interleaved, so a burst of load on the host touches each alike
        for n, (name, executable) in enumerate(executables.items()):
            for command, argv in commands(f"{tag}-{n}", i).items():
                times.setdefault((name, command), []).append(timed(executable, argv))
    print("| command | parkway | wall median s | wall min..max s | CPU median s |")
    print("|---|---|---|---|---|")
    for (name, command), runs in sorted(times.items(), key=lambda item: (item[0][1], item[0][0])):
        wall, cpu = [w for w, _ in runs], [c for _, c in runs]
        print(
            f"| `parkway {command}` | {name} | {statistics.median(wall):.3f} | {min(wall):.3f}..{max(wall):.3f} | "
            f"{statistics.median(cpu):.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
