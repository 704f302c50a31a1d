"""``parkway up`` as a newcomer meets it (issue 19, items 2 and 3): the first start of an empty embedded
database makes an admin, an agent and a human and prints their tokens once, with the stack's URLs; Flower's
login is made once into PARKWAY_HOME and reaches Flower through its environment, never its command line; a
SIGKILLed worker is restarted and the stack stays up; a child that dies past the restart limit stops it all.
A second start prints the URLs and where the tokens came from, never the tokens."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import httpx

from tests.cli.support import Up, child_pids, group_alive, parkway, start_up
from tests.support import wait_for
from tests.workflows import EFFECTS_DDL

TOKEN_LINE = re.compile(r"^parkway up:\s+(admin|agent|human)\s+(pk_\S+)\s+\(", re.MULTILINE)
URLS = ("API          {api}", "API docs     {api}/docs", "Decisions    {api}/decisions", "run history  {api}/runs")


def wait_up(up: Up) -> dict[str, int]:
    wait_for(lambda: up.printed("all up in"), timeout=120, what="parkway up ready")
    wait_for(lambda: up.printed(f"Flower       {up.flower}"), timeout=10, what="the URLs printed")
    pids = child_pids(up.stdout())
    up.groups = list(pids.values())
    return pids


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def make_effects_table(up: Up) -> None:
    """The table tests.workflows records its committed effects in, made through the store's engine."""
    code = f"from sqlalchemy import text\nfrom parkway.db import transaction\nwith transaction() as s:\n    s.execute(text({EFFECTS_DDL!r}))"  # noqa: E501
    done = subprocess.run([sys.executable, "-c", code], env=up.env, cwd=up.home.parent, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_up__first_start_prints_tokens_once_a_killed_worker_is_restarted_and_the_stack_stays_up(
    tmp_path: Path, home: Path
) -> None:
    up = start_up(tmp_path, home)
    try:
        pids = wait_up(up)
        stdout = up.stdout()

        # Then the first start made three principals and printed each token once, with how to make more
        tokens = dict(TOKEN_LINE.findall(stdout))
        assert set(tokens) == {"admin", "agent", "human"}, stdout
        assert all(stdout.count(token) == 1 for token in tokens.values())
        assert "parkway token create --kind agent|human|admin --name NAME" in stdout
        assert "parkway grant create --principal NAME --target TARGET" in stdout
        for line in URLS:
            assert f"parkway up: {line.format(api=up.api)}" in stdout, stdout

        # And Flower's login was made once into PARKWAY_HOME (0600), and is nowhere on its command line
        login = (home / "flower.auth").read_text().strip()
        user, _, password = login.partition(":")
        assert stat.S_IMODE((home / "flower.auth").stat().st_mode) == 0o600
        assert f"(user:password {login})" in stdout and stdout.count(password) == 1
        assert "flower" in cmdline(pids["flower"]) and password not in cmdline(pids["flower"])
        assert httpx.get(f"{up.flower}/api/workers", timeout=10).status_code == 401
        assert httpx.get(f"{up.flower}/api/workers", auth=(user, password), timeout=30).status_code == 200

        # And the tokens work: the admin lists principals, the agent starts a run (from the shell)
        with httpx.Client(base_url=up.api, timeout=30) as http:
            admin = http.get("/v1/principals", headers={"Authorization": f"Bearer {tokens['admin']}"})
            assert admin.status_code == 200, admin.text
            assert {p["name"] for p in admin.json()["items"]} == {"admin", "agent", "human"}

            # When the worker is SIGKILLed
            os.kill(pids["worker"], signal.SIGKILL)

            # Then parkway up says so, restarts it, and it is ready again
            wait_for(lambda: up.printed("worker exited unexpectedly (by SIGKILL); restarting it in 1s"), timeout=30,
                     what="the restart line")  # fmt: skip
            wait_for(lambda: up.printed("(again, after a restart)"), timeout=90, what="the worker ready again")
            restarted = child_pids(up.stdout())
            up.groups += [restarted["worker"]]
            assert restarted["worker"] != pids["worker"] and not group_alive(pids["worker"])
            assert {name: pid for name, pid in restarted.items() if name != "worker"} == {
                name: pid for name, pid in pids.items() if name != "worker"
            }

            # And the stack stays up: the API answers and a run started now completes on the new worker
            assert http.get("/healthz").json() == {"status": "ok"}
            make_effects_table(up)
            # (t.ask_one asks on team:ops: the human who answers and the agent who asks get that target too,
            # from the shell)
            for principal in ("human", "agent"):
                granted = parkway(
                    "grant", "create", "--principal", principal, "--target", "team:ops", env=up.env, cwd=tmp_path
                )
                assert granted.returncode == 0, granted.stderr
            started = parkway("run", "start", "t.ask_one", "--as", "agent", "--target", "example", env=up.env,
                              cwd=tmp_path)  # fmt: skip
            assert started.returncode == 0, started.stderr
            run_id = started.stdout.strip()
            human = {"Authorization": f"Bearer {tokens['human']}"}

            def status() -> str:
                return str(http.get(f"/v1/runs/{run_id}", headers=human).json()["status"])

            wait_for(lambda: status() == "waiting", timeout=60, what="run waiting")
            pending = http.get("/v1/interactions", params={"status": "pending", "run_id": run_id}, headers=human)
            [question] = pending.json()["items"]
            answered = http.post(f"/v1/interactions/{question['id']}/answer", headers=human,
                                 json={"response_id": "r-1", "value": "ship"})  # fmt: skip
            assert answered.status_code == 200, answered.text
            wait_for(lambda: status() == "completed", timeout=60, what="run completed")

        up.proc.send_signal(signal.SIGINT)
        assert up.proc.wait(timeout=90) == 0, up.logs()
    finally:
        up.stop()

    # When it starts again on the same home, with one restart allowed
    again = start_up(tmp_path, home, "--restarts", "1", "--restart-window", "600", name="again")
    try:
        pids = wait_up(again)
        stdout = again.stdout()
        # Then it prints the URLs and where the tokens came from, never a token, nor Flower's password
        assert TOKEN_LINE.findall(stdout) == [] and "pk_" not in stdout, stdout
        assert "printed once, by the first start (" in stdout, stdout
        for line in URLS:
            assert f"parkway up: {line.format(api=again.api)}" in stdout, stdout
        assert (home / "flower.auth").read_text().strip() == login and password not in stdout
        assert f"flower ready: {again.flower}  (user parkway, password in {home / 'flower.auth'})" in stdout

        # When beat dies, is restarted, and dies again
        os.kill(pids["beat"], signal.SIGKILL)
        wait_for(lambda: child_pids(again.stdout())["beat"] != pids["beat"], timeout=30, what="beat restarted")
        second = child_pids(again.stdout())["beat"]
        again.groups.append(second)
        os.kill(second, signal.SIGKILL)

        # Then it stops everything, saying why, exit 1, and nothing is left
        assert again.proc.wait(timeout=120) == 1, again.logs()
        stdout = again.stdout()
        assert "beat exited unexpectedly (by SIGKILL) after 1 restarts within 600s, the limit; stopping everything" in (
            stdout
        ), stdout
        wait_for(lambda: not any(group_alive(g) for g in again.groups), timeout=10, what="no child left")
    finally:
        again.stop()
