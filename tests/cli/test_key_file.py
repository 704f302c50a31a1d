"""The embedded key file (issue 17 §7): a ``parkway up`` whose ``PARKWAY_HOME/secret.key`` is empty is
refused at start, with the file and the reason, and the file is not made again over; processes that
make a new home's key at once agree on one whole key."""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
from pathlib import Path

from tests.cli.support import child_pids, embedded_env, free_port, stop


def test_up__empty_key_file__refuses_to_start_naming_the_file(tmp_path: Path) -> None:
    # Given an embedded home whose key file is empty
    home = tmp_path / "home"
    home.mkdir()
    key_file = home / "secret.key"
    key_file.write_text("")
    cmd = [sys.executable, "-m", "parkway.cli", "up", "--port", str(free_port()), "--no-flower", "--concurrency", "1"]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=embedded_env(PARKWAY_HOME=str(home)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    # When it starts (a `parkway up` that does not refuse is stopped after a minute, and fails below)
    out, err = b"", b""
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        stop(proc, list(child_pids(out.decode(errors="replace")).values()))
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    # Then it exits non-zero before starting anything, saying which file and why
    assert proc.returncode not in (0, None), f"{stdout}\n{stderr}"
    assert not child_pids(stdout), stdout
    assert f"the key file {key_file.resolve()} is empty" in stderr, stderr
    # And the file is left as it was
    assert key_file.read_text() == ""


MAKE_KEYS = """
import json, sys
from parkway.settings import Settings
for home in sys.argv[1:]:
    print(json.dumps([home, Settings(secret_key="", database_url="", home=home).resolved_secret_key()]))
"""


def test_key_file__processes_starting_at_once_agree_on_one_whole_key(tmp_path: Path) -> None:
    # Given four processes that each make the embedded key of the same twenty new homes, in the same order
    homes = [str(tmp_path / f"home{n}") for n in range(20)]
    env = embedded_env()
    procs = [
        subprocess.Popen([sys.executable, "-c", MAKE_KEYS, *homes], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outputs = [proc.communicate(timeout=60)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0, 0]
    # Then for each home they all read the one whole key its file holds, 0600, no temporary file left
    keys: dict[str, set[str]] = {home: set() for home in homes}
    for output in outputs:
        for line in output.splitlines():
            home, key = json.loads(line)
            keys[home].add(key)
    for home in homes:
        path = Path(home) / "secret.key"
        assert keys[home] == {path.read_text().strip()} and len(path.read_text().strip()) >= 32, keys[home]
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert [p.name for p in Path(home).iterdir()] == ["secret.key"]  # no temporary file left behind
