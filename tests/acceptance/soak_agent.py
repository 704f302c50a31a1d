"""``python -m tests.acceptance.soak_agent URL TOKEN EFFECTS``: a remote worker of the soak test, written as a
TypeScript or Go agent would be (httpx only, docs/worker-protocol.md). It leases ``soak.decide@1``, journals a
``never`` tool call whose effect appends a line to ``EFFECTS``, and completes with what it saw. The test SIGKILLs
it at random moments; a new one takes over."""

from __future__ import annotations

import random
import sys
import time
from typing import Any

import httpx

KEY = "soak.decide@1"


def effect(effects: str, run_id: str) -> None:
    with open(effects, "a") as out:
        out.write(run_id + "\n")


def serve(http: httpx.Client, item: dict[str, Any], effects: str) -> None:
    lease = f"/v1/worker/leases/{item['lease_id']}"
    time.sleep(random.uniform(0, 0.05))
    tool = http.post(f"{lease}/tools", json={"name": "notify", "key": "notify", "args": {}, "replay": "never"})
    if tool.status_code != 200:
        return  # the lease was lost meanwhile: whoever holds it now goes on
    state = tool.json()
    if state["state"] == "run":
        effect(effects, item["run_id"])
        time.sleep(random.uniform(0.05, 0.3))  # a kill here leaves the call executing: possibly ran
        http.post(f"{lease}/tools/notify/outcome", json={"result": "sent"})
        ran = "ran"
    else:
        ran = "possibly ran" if state["possibly_ran"] else "settled"
    time.sleep(random.uniform(0, 0.05))
    answer = item["answers"]["choice"]["value"]
    http.post(f"{lease}/complete", json={"outcome": {"type": "complete", "result": {"answer": answer, "notify": ran}}})


def main(url: str, token: str, effects: str) -> None:
    worker = f"soak-{random.getrandbits(32):08x}"
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        while True:
            body = {"worker": worker, "serves": [KEY], "max": 1, "wait_s": 2, "lease_s": 5}
            got = http.post("/v1/worker/lease", json=body)
            got.raise_for_status()
            for item in got.json()["items"]:
                serve(http, item, effects)


if __name__ == "__main__":
    main(*sys.argv[1:4])
