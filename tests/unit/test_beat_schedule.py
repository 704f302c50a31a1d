"""The beat schedule lives in ``beat/`` (issue 18) and still reaches ``celery -A tasks.celery_app:app beat``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from beat.schedule import SWEEP_ENTRY, beat_schedule
from parkway.settings import Settings
from tasks.celery_app import SWEEP, SWEEP_QUEUE

ROOT = Path(__file__).resolve().parents[2]


def test_the_schedule_is_one_sweep_per_interval_on_the_sweep_queue_expiring_after_one_interval() -> None:
    settings = Settings(sweep_interval_s=7)
    assert beat_schedule(settings) == {
        SWEEP_ENTRY: {"task": SWEEP, "schedule": 7.0, "options": {"expires": 7.0, "queue": SWEEP_QUEUE}}
    }


def test_beat_has_the_schedule_once_it_has_loaded_the_apps_modules(tmp_path: Path) -> None:
    # What ``celery beat`` does before its scheduler reads ``beat_schedule``: load the app, then its modules.
    script = (
        "import json; from tasks.celery_app import app\n"
        "before = dict(app.conf.beat_schedule)\n"
        "app.loader.init_worker()\n"
        "print(json.dumps([before, app.conf.beat_schedule]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKWAY_")}
    env.update(PARKWAY_HOME=str(tmp_path), PARKWAY_SWEEP_INTERVAL_S="3", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    before, after = json.loads(done.stdout.splitlines()[-1])
    assert before == {}, "the schedule is beat's: tasks.celery_app must not carry it"
    assert after == {SWEEP_ENTRY: {"task": SWEEP, "schedule": 3.0, "options": {"expires": 3.0, "queue": SWEEP_QUEUE}}}
