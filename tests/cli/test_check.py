"""``parkway check`` (issue 35, item 3): every Park/Next reference of the workflow modules resolves, checked by
the command, before ``parkway up`` starts anything, and at a worker's start (a real ``celery worker``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from parkway import embedded
from tests.cli.support import embedded_env, parkway, start_up
from tests.support import ROOT, Stack, wait_for

DANGLING = [
    "tests/checked/dangling.py:14: Park names continuation dangle.decide@2, which is not registered "
    "(registered: dangle.decide@1)",
    "tests/checked/dangling.py:20: Next names step dangle.exec, which is not registered (did you mean dangle.execute?)",
    "tests/checked/dangling.py:21: Next names helper, which is not decorated with @step",
]


def test_check__a_module_with_dangling_references_exits_1_naming_each_file_and_line(tmp_path: Path) -> None:
    env = embedded_env(PARKWAY_HOME=str(tmp_path), PARKWAY_IMPORTS="tests.checked.dangling")
    done = parkway("check", env=env, cwd=ROOT)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout.splitlines() == DANGLING, done.stdout
    assert done.stderr == "parkway check: 3 references of the workflow modules do not resolve\n", done.stderr


def test_check__a_clean_module_exits_0_with_a_summary(tmp_path: Path) -> None:
    # Strings, a module-level constant and decorated functions all resolve
    env = embedded_env(PARKWAY_HOME=str(tmp_path), PARKWAY_IMPORTS="tests.checked.clean")
    done = parkway("check", env=env, cwd=ROOT)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stdout == "parkway check: 1 module, 2 steps, 2 continuation versions; 4 references resolve\n"


def test_check__a_module_in_the_current_directory_is_found(tmp_path: Path) -> None:
    # Given a workflow module where a user writes one: the directory `make run` / `parkway up` is run from
    (tmp_path / "mine.py").write_text(
        "from tasks.sdk import Complete, Next, step\n\n"
        "@step('mine.first')\ndef first(ctx, payload):\n    return Next(second)\n\n"
        "@step('mine.second')\ndef second(ctx, payload):\n    return Complete()\n"
    )
    env = embedded_env(PARKWAY_HOME=str(tmp_path / "home"), PARKWAY_IMPORTS="mine")
    env.pop("PYTHONPATH")  # as a shell has it
    # The console script, as `make run` runs it (`python -m` would put the directory on the path itself)
    script = str(Path(sys.executable).parent / "parkway")
    done = subprocess.run([script, "check"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stdout.startswith("parkway check: 1 module, 2 steps"), done.stdout


def test_up__refuses_to_start_with_the_same_lines(tmp_path: Path) -> None:
    up = start_up(tmp_path, tmp_path / "home", "--no-flower", imports="tests.checked.dangling")
    try:
        wait_for(lambda: up.proc.poll() is not None, timeout=60, what="parkway up to refuse")
    finally:
        up.stop()  # whatever it started, had it started
    assert up.proc.returncode == 2, up.logs()
    head, *lines = up.err.read_text().splitlines()
    assert head == "parkway up: refusing to start: 3 references of the workflow modules do not resolve:", head
    assert lines == [f"{ROOT}/{line}" for line in DANGLING], up.logs()  # run elsewhere: absolute paths
    assert "starting" not in up.stdout() and not embedded.data_dir(tmp_path / "home").exists(), up.logs()


def test_worker__warns_naming_each_reference_that_does_not_resolve_and_starts(stack: Stack) -> None:
    # A fleet split by module starts in any order: what a reference names is decided at run time (a gap waits)
    worker = stack.start_worker(PARKWAY_IMPORTS="tests.checked.dangling")
    text = worker.text()
    assert worker.alive() and "refusing" not in text, text[-3000:]
    assert "3 references of the workflow modules do not resolve, no live worker runs them now" in text, text
    assert all(line in text for line in DANGLING), text[-3000:]


def test_worker__starts_when_another_live_worker_runs_the_key_it_lacks(stack: Stack) -> None:
    # Given a fleet split by module: a live worker runs the continuation the other's step parks on
    stack.start_worker(concurrency=1, PARKWAY_IMPORTS="tests.checked.split_continuations")

    # When the worker with the steps starts, it starts (parkway check alone, without the fleet, reports it)
    steps = stack.start_worker(concurrency=1, PARKWAY_IMPORTS="tests.checked.split_steps")

    assert steps.alive() and "refusing" not in steps.text(), steps.text()[-3000:]
    alone = parkway("check", env=embedded_env(PARKWAY_IMPORTS="tests.checked.split_steps"), cwd=ROOT)
    assert alone.returncode == 1 and "split.decide@1, which is not registered" in alone.stdout, alone.stdout
