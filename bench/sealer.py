"""``python -m bench.sealer BATCH INTERVAL_S``: the sweep's sealing (category 8) alone, in a process of its own,
for the bench's ``sealing`` case: a checkpoint of up to BATCH final events, at once again while they come
full, else after INTERVAL_S (the beat cadence). Stopped by SIGTERM."""

from __future__ import annotations

import signal
import sys
import threading

from models.store.seals import seal_next
from parkway.db import transaction


def main(batch: int, interval_s: float) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.is_set():
        with transaction() as session:
            sealed = seal_next(session, batch=batch)
        if sealed is None or sealed.count < batch:
            stop.wait(interval_s)


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]))
