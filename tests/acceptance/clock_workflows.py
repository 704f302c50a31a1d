"""A workflow for tests/acceptance/test_clock.py, imported by its workers (PARKWAY_IMPORTS) and the test.

Its body waits with ``threading.Event.wait``, not ``time.sleep``: under libfaketime with its monotonic clock
left alone, ``time.sleep`` (``clock_nanosleep`` on an absolute monotonic time) fails with EINVAL.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tasks.sdk import Complete, Context, step

HANG = "t.clock_hang"


@step(HANG)
def hang(ctx: Context, payload: dict[str, Any]) -> Complete:
    """On its first attempt, waits (up to 60 s) for the flag file ``payload["flag"]``; then completes."""
    review_id = ctx.start_review("clock")  # a row stamped with this process's own clock: the test checks it
    if ctx.attempt == 1:
        pause = threading.Event()
        for _ in range(1200):
            if Path(payload["flag"]).exists():
                break
            pause.wait(0.05)
    ctx.record_review(review_id, "clean", 0, 0)
    return Complete(result={"attempt": ctx.attempt})
