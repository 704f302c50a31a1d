"""``python -m bench.apiprofile OUT.pstats [uvicorn arguments]``: uvicorn under cProfile, every thread.

The API answers on its event loop and on its thread pool (``api.deps.in_thread``): each thread gets a
profiler of its own when it first runs Python (``threading.setprofile``), and all of them are merged into
``OUT.pstats`` when uvicorn exits (SIGTERM). cProfile's own clock is wall time (a thread's CPU clock, a
Python callable, made the API ten times slower): the time of a wait (a socket's ``recv``, a lock) is in the
function that waited. The figures say where the time goes, not how much there is (``python -m
bench.httpcost`` measures that, unprofiled).
"""

from __future__ import annotations

import cProfile
import pstats
import signal
import sys
import threading
from typing import Any

_profiles: list[cProfile.Profile] = []


def _profile_this_thread(*_: Any) -> None:
    """The ``threading.setprofile`` hook: runs once in each new thread, then cProfile replaces it."""
    profile = cProfile.Profile()
    _profiles.append(profile)
    profile.enable()


def _exit(*_: Any) -> None:
    raise SystemExit(0)


def main() -> None:
    out, uvicorn_args = sys.argv[1], sys.argv[2:]
    import uvicorn

    # uvicorn raises the signal it stopped on again once it has shut down, under the handler it found:
    # this one, so the profiles are written.
    signal.signal(signal.SIGTERM, _exit)
    threading.setprofile(_profile_this_thread)
    _profile_this_thread()
    sys.argv = ["uvicorn", *uvicorn_args]
    try:
        uvicorn.main()
    except SystemExit:
        pass
    finally:
        merged = pstats.Stats(_profiles[0])
        for profile in _profiles[1:]:
            merged.add(profile)
        merged.dump_stats(out)


if __name__ == "__main__":
    main()
