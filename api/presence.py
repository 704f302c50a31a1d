"""The API's heartbeat (``models.served``): while it answers, the remote fleet counts as up, so a remote
key's grace counts only time remote workers could reach Parkway; an API outage gives each a fresh grace."""

from __future__ import annotations

import asyncio
import logging

from starlette.concurrency import run_in_threadpool

from models import store
from parkway.db import failure_line, single_statement
from parkway.settings import get_settings

log = logging.getLogger("parkway.api")

LIVE_HEARTBEATS = 3  # present this many heartbeats after each one, as a worker


def beat_once(ttl_s: float) -> None:
    """One heartbeat; a failed one is a line (the next may succeed before this one's ttl runs out)."""
    try:
        with single_statement(durable=False) as conn:
            store.api_heartbeat(conn, ttl_s)
    except Exception as exc:
        log.warning("API heartbeat failed: %s", failure_line(exc), extra={"action": "heartbeat"})


async def heartbeat() -> None:
    """Stamp the API's presence every ``PARKWAY_WORKER_HEARTBEAT_S`` until cancelled."""
    interval = get_settings().worker_heartbeat_s
    while True:
        await run_in_threadpool(beat_once, LIVE_HEARTBEATS * interval)
        await asyncio.sleep(interval)
