"""Whether a process may start: its secret key, and the database schema its code needs (invariant 10).

The API, the worker and beat ask the same question the same way. A bad key or a schema this code does not
match refuses at once; a database that cannot be reached yet (a restart, a stack still coming up) is waited
for, saying so, for up to ``DATABASE_WAIT_S``.
"""

from __future__ import annotations

import sys
import time

from parkway.db import database_unavailable, failure_line, get_engine
from parkway.errors import ParkwayError
from parkway.migrate import require_current_schema
from parkway.settings import get_settings

DATABASE_WAIT_S = 60.0


def start_problem(process: str, *, wait_s: float = DATABASE_WAIT_S) -> str | None:
    """Why ``process`` (``api``, ``worker``, ``beat``) must not start, or ``None``. While the database cannot
    be reached, one line on stderr says that it waits, then it tries again each second until ``wait_s``."""
    deadline = time.monotonic() + wait_s
    waiting = False
    while True:
        try:
            get_settings().resolved_secret_key()
            require_current_schema(get_engine())
            return None
        except Exception as exc:
            if not database_unavailable(exc) or time.monotonic() > deadline:
                return str(exc) if isinstance(exc, ParkwayError) else failure_line(exc)
            if not waiting:
                sys.stderr.write(f"parkway {process}: the database cannot be reached yet; waiting up to "
                                 f"{wait_s:.0f} s ({type(exc).__name__})\n")  # fmt: skip
                sys.stderr.flush()
                waiting = True
            time.sleep(1.0)
