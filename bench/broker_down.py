"""``--cases broker_down``: answers per second while the broker refuses connections, beside a working one.

Each variant answers its own parked steps from a fresh process (``python -m bench.broker_down``, the
answering side alone, as an API process would) with ``--threads`` threads. No worker runs: the variants
differ only in what the publish after each answer costs. The refused broker is a free local port where
nothing listens. A third, small variant puts the app's publish retry policy back on the answer path (what
every answer paid before the answer path published once).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import ROOT, free_port, log

RETRY_N = 40  # answers in the retry-policy variant (about 2 s each while the broker refuses)


def case_broker_down(bench: Any) -> None:
    from bench.cases import loadavg, park_many

    args = bench.args
    refused = f"redis://127.0.0.1:{free_port()}/0"
    variants = [
        ("broker up", args.n, bench.services.broker_url, False),
        ("broker refusing", args.n, refused, False),
        ("broker refusing, publish retry policy (before)", min(RETRY_N, args.n), refused, True),
    ]
    rates: dict[str, float] = {}
    for label, n, broker, retry in variants:
        parked = park_many(bench, n)
        ids_file = bench.services.out_dir / f"broker-down-{uuid.uuid4().hex[:6]}.json"
        ids_file.parent.mkdir(parents=True, exist_ok=True)
        ids_file.write_text(json.dumps([p.interaction_id for p in parked]))
        cmd = [
            sys.executable,
            "-m",
            "bench.broker_down",
            str(ids_file),
            str(args.threads),
            *(["--retry"] if retry else []),
        ]
        env = bench.services.child_env(PARKWAY_BROKER_URL=broker)
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"broker_down answerer failed ({label}):\n{done.stderr[-3000:]}")
        out = json.loads(done.stdout.strip().splitlines()[-1])
        rate = out["answers"] / out["seconds"]
        rates[label] = rate
        log(f"    {label}: {out['answers']} answers in {out['seconds']:.2f}s = {rate:.0f}/s ({out['errors']} errors)")
        bench.metric("broker_down", f"answers/s, {label} (Python, {args.threads} threads)", "/s").add(rate)
        bench.record("broker_down", {"variant": label, "n": n, **out, "load": loadavg()})
    up, down = rates.get("broker up"), rates.get("broker refusing")
    if up and down:
        bench.metric("broker_down", "answers/s ratio, broker refusing / up", "ratio").add(down / up)


def _answer_all(ids: list[str], threads: int) -> dict[str, Any]:
    from bench import seed
    from bench.cases import Producers
    from tasks import sdk

    def answer(iid: str) -> Any:
        return sdk.answer(iid, "yes", response_id=uuid.uuid4().hex, principal=seed.HUMAN)

    answer(ids[0])  # warm: imports, the engine's pool, the broker's first connect attempt
    producers = Producers(ids[1:], answer, threads)
    started = producers.start()
    finished = producers.join()
    return {"answers": len(ids) - 1, "seconds": finished - started, "errors": len(producers.errors)}


def main(argv: list[str]) -> int:
    import logging

    logging.getLogger("parkway.publish").setLevel(logging.ERROR)  # one WARNING per answer while refused
    ids, threads = json.loads(Path(argv[0]).read_text()), int(argv[1])
    if "--retry" in argv:
        import tasks.sdk
        from tasks.publish import publish

        tasks.sdk.publish = lambda items, **_: publish(items, retry=True)  # type: ignore[assignment]
    t0 = time.monotonic()
    result = _answer_all(ids, threads)
    result["wall_s"] = time.monotonic() - t0
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
