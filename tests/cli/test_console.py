"""``parkway up`` on the embedded defaults after its first week (issue 35, items 1 and 2): it runs a real
broker, the embedded Valkey, so Flower's Broker API lists the queues and their depths; and its console stays
quiet: the children's output goes to ``PARKWAY_HOME/logs`` (``parkway logs`` shows it), a sweep pass that
found nothing is no line at all, and an idle stack prints nothing. The broker never outlives the stack: one an
earlier ``parkway up`` left is shut down, and a killed ``parkway up`` takes its broker along.

An idle minute at the default cadence is 12 sweep passes (``PARKWAY_SWEEP_INTERVAL_S=5``) and 6 worker
heartbeats (``PARKWAY_WORKER_HEARTBEAT_S=10``). Here both run every 0.5 s and the test waits for 12 more
passes (the API's ``parkway_sweep_passes_total``): the same periodic work an idle minute does, in a few
seconds. Nothing else writes to the console but ``parkway up``'s supervisor, which speaks only when a child
changes state."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import httpx

from parkway import logfiles, valkey
from tests.cli.support import child_pids, group_alive, parkway, start_up
from tests.support import wait_for

QUEUES = {"parkway.steps", "parkway.continuations", "parkway.sweep"}
IDLE_MINUTE_PASSES = 12  # 60 s / the default PARKWAY_SWEEP_INTERVAL_S of 5 s
FAST = {"PARKWAY_SWEEP_INTERVAL_S": "0.5", "PARKWAY_WORKER_HEARTBEAT_S": "0.5"}
PASSES = re.compile(r"^parkway_sweep_passes_total (\S+)$", re.MULTILINE)


def sweeps_done(api: str) -> int:
    """The sweep passes the stack's database has seen end, as its API's /metrics says."""
    found = PASSES.search(httpx.get(f"{api}/metrics", timeout=30).text)
    return int(float(found.group(1))) if found else 0


def test_up__flower_lists_the_queues_of_the_embedded_broker_and_an_idle_stack_prints_nothing(
    tmp_path: Path, home: Path
) -> None:
    # Given a Valkey an earlier `parkway up` of this home left running (killed where no parent-death signal is)
    leftover = subprocess.Popen(valkey.command(home), stdout=subprocess.DEVNULL, start_new_session=True)
    wait_for(lambda: valkey.problem(home) is None, timeout=30, what="the leftover Valkey answering")
    # When `parkway up` starts with nothing configured (its sweep and heartbeat every 0.5 s)
    up = start_up(tmp_path, home, extra_env=FAST)
    try:
        wait_for(lambda: up.printed("parkway up: logs "), timeout=120, what="parkway up ready, its URLs printed")
        stdout = up.stdout()
        pids = child_pids(stdout)
        up.groups = list(pids.values())
        # Then it shuts the leftover down, runs its own embedded Valkey first, and says which workflows and
        # versions it loaded
        assert leftover.wait(timeout=10) == 0 and f"shut down the {valkey.describe(home)} an earlier" in stdout
        assert list(pids) == ["broker", "api", "worker", "outbound", "beat", "flower"], stdout
        assert f"+ {valkey.describe(home)}; Ctrl-C stops everything" in stdout, stdout
        assert re.search(r"workflows from PARKWAY_IMPORTS=tests.workflows: steps [^;]*t\.ask_one[,;]", stdout), stdout
        assert re.search(r"continuations .*t\.one_done@1(,|$)", stdout, re.MULTILINE), stdout

        # And Flower's Broker API lists the named queues with their depths
        login = re.search(r"flower ready: \S+\s+\(user:password (\S+?):(\S+)\)", stdout)
        assert login is not None, stdout

        def queue_lengths() -> dict[str, int] | None:
            answer = httpx.get(f"{up.flower}/api/queues/length", auth=login.groups(), timeout=30)
            if answer.status_code != 200:
                return None
            return {q["name"]: q["messages"] for q in answer.json()["active_queues"]}

        lengths = wait_for(lambda: (found := queue_lengths()) and set(found) >= QUEUES and found, timeout=60,
                           what="Flower's queue lengths")  # fmt: skip
        assert all(isinstance(lengths[q], int) and lengths[q] >= 0 for q in QUEUES), lengths
        # (and so does the API's /metrics, read from the same broker)
        metrics = httpx.get(f"{up.api}/metrics", timeout=30).text
        assert "parkway_broker_up 1.0" in metrics and 'parkway_queue_length{queue="parkway.steps"}' in metrics

        # When the stack idles for a minute's worth of sweep passes
        console = (up.stdout(), up.err.read_text())
        before = sweeps_done(up.api)
        wait_for(lambda: sweeps_done(up.api) >= before + IDLE_MINUTE_PASSES, timeout=60,
                 what=f"{IDLE_MINUTE_PASSES} idle sweep passes")  # fmt: skip

        # Then the console printed nothing, and `parkway logs` says nothing of the idle passes: neither the
        # sweep (no summary) nor Celery (no task received, succeeded or sent by beat)
        assert (up.stdout(), up.err.read_text()) == console
        logs = parkway("logs", "-n", "100000", "--no-follow", env=up.env, cwd=tmp_path)
        assert logs.returncode == 0, logs.stderr
        about_sweeps = ("parkway.sweep[", '"logger": "parkway.sweep"', "sweep pass:", "Sending due task")
        assert [line for line in logs.stdout.splitlines() if any(word in line for word in about_sweeps)] == []

        # And `parkway logs` prints a child's last lines, or every child's with its name
        worker = parkway("logs", "worker", "-n", "2", "--no-follow", env=up.env, cwd=tmp_path)
        assert worker.returncode == 0, worker.stderr
        assert len(worker.stdout.splitlines()) == 2, worker.stdout
        every = parkway("logs", "-n", "1", "--no-follow", env=up.env, cwd=tmp_path)
        assert every.returncode == 0, every.stderr
        assert [line.split(" | ")[0].strip() for line in every.stdout.splitlines()] == list(logfiles.NAMES)

        # When `parkway up` itself dies without a chance to stop anything
        up.proc.kill()
        # Then its broker does not outlive it (nor does any other child)
        wait_for(lambda: not any(group_alive(pid) for pid in pids.values()), timeout=30, what="no child left")
        assert valkey.problem(home) is not None
    finally:
        up.stop()
        if leftover.poll() is None:
            leftover.kill()
