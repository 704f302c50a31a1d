"""How long the hot CLI commands take as whole processes (issue 43 item 3), against a running stack.

    PARKWAY_HOME=/path/to/home python -m bench.cli_times [--reps 10] [--parkway .venv/bin/parkway]

The stack is one ``parkway up`` made (its agent, principal ``agent``, holds a grant on target ``example``).
Each command runs ``--reps`` times as a fresh process (``subprocess.run``); each must exit 0. Prints the median,
minimum and maximum of each, in seconds, as a Markdown table row.
"""

from __future__ import annotations

import argparse
import os
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


def timed(parkway: str, argv: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([parkway, *argv], capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"parkway {' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--parkway", default=str(Path(sys.executable).with_name("parkway")))
    args = parser.parse_args()
    if "PARKWAY_HOME" not in os.environ and "PARKWAY_DATABASE_URL" not in os.environ:
        raise SystemExit("set PARKWAY_HOME (or PARKWAY_DATABASE_URL) to the running stack's")
    tag = uuid.uuid4().hex[:8]
    times: dict[str, list[float]] = {name: [] for name in commands(tag, 0)}
    for i in range(args.reps):  # interleaved, so a burst of load on the host touches each command alike
        for name, argv in commands(tag, i).items():
            times[name].append(timed(args.parkway, argv))
    print("| command | median s | min s | max s |")
    print("|---|---|---|---|")
    for name, took in times.items():
        print(f"| `parkway {name}` | {statistics.median(took):.3f} | {min(took):.3f} | {max(took):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
