"""The embedded key file (issue 17 §7): a ``parkway up`` whose ``PARKWAY_HOME/secret.key`` is empty is
refused at start, with the file and the reason, and the file is not made again over."""

from __future__ import annotations

import signal
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
