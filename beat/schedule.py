"""The beat schedule: one recovery sweep every ``sweep_interval_s``, on the sweep queue.

Every Celery process loads ``beat.sweep`` (``tasks.celery_app`` lists it in ``imports``), which installs
this schedule beside the task it schedules; ``celery -A tasks.celery_app:app beat`` loads those modules
before its scheduler reads ``beat_schedule``. Beat points at ``tasks``, never the other way round.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from parkway.settings import Settings
from tasks.celery_app import SWEEP, SWEEP_QUEUE

SWEEP_ENTRY = "parkway-sweep"


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    return {
        SWEEP_ENTRY: {
            "task": SWEEP,
            "schedule": settings.sweep_interval_s,
            # Never let sweeps pile up while no worker is consuming.
            "options": {"expires": settings.sweep_interval_s, "queue": SWEEP_QUEUE},
        }
    }


def install(app: Celery, settings: Settings) -> None:
    app.conf.beat_schedule = beat_schedule(settings)
