"""sealing: answer→continuation throughput with the event log's seal running beside it and without, in one
run, reps alternating; and whether the seal keeps up (its lag, in final events not sealed yet, sampled
through the run, must not grow). Issue 45: on >= 0.97 of off."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field

from sqlalchemy import text

from bench import seed
from bench.cases.common import Bench, park_many, ratio
from bench.cases.throughput import run_parkway_throughput
from bench.harness import log, spawn, stop_process
from parkway.db import transaction
from parkway.settings import get_settings

UNSEALED = text(
    "SELECT count(*) FROM events WHERE seq > (SELECT coalesce(max(last_seq), 0) FROM seals)"
)  # a range of the primary key


def unsealed() -> int:
    with transaction() as session:
        return int(session.execute(UNSEALED).scalar_one())


def seal_everything() -> None:
    """Seal what earlier variants left, outside the timed window: each sealed run starts from no lag."""
    from models.store.seals import seal_next

    while True:
        with transaction() as session:
            if seal_next(session, batch=10_000) is None:
                return


@dataclass
class LagSampler:
    """The seal's lag every ``every_s`` seconds while a variant runs."""

    every_s: float = 0.5
    samples: list[int] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            self.samples.append(unsealed())


def run_variant(bench: Bench, n: int, *, sealing: bool) -> tuple[float, LagSampler]:
    parked = park_many(bench, n)
    seal_everything()
    sampler, sealer = LagSampler(), None
    if sealing:
        settings = get_settings()
        cmd = [sys.executable, "-m", "bench.sealer", str(settings.sweep_batch), str(settings.sweep_interval_s)]
        sealer = spawn(cmd, env=bench.services.child_env(), log_path=bench.services.out_dir / "logs" / "sealer.log")
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    try:
        label = f"python, seal {'on' if sealing else 'off'}"
        rate, _ = run_parkway_throughput(bench, n, http_base=None, label=label, parked=parked)
    finally:
        sampler.stop.set()
        thread.join()
        if sealer is not None:
            stop_process(sealer, grace_s=10)
    return rate, sampler


def case_sealing(bench: Bench) -> None:
    args = bench.args
    log(f"== sealing: N={args.n}, {args.reps} reps, seal on vs off, PARKWAY_SWEEP_BATCH={get_settings().sweep_batch}")
    on_m = bench.metric("sealing", "Parkway answer→consume, seal on", "/s")
    off_m = bench.metric("sealing", "Parkway answer→consume, seal off", "/s")
    ratio_m = bench.metric("sealing", "ratio seal on ÷ seal off", "x", ">= 0.97")
    peak_m = bench.metric("sealing", "seal lag, peak (final events not sealed)", "events")
    end_m = bench.metric("sealing", "seal lag, last sample of the run", "events")
    slope_m = bench.metric("sealing", "seal lag, second half's mean ÷ first half's", "x", "<= 1")
    for rep in range(args.reps):
        order = [False, True] if rep % 2 == 0 else [True, False]
        rates = {}
        for sealing in order:
            rates[sealing], sampler = run_variant(bench, args.n, sealing=sealing)
            if sealing and sampler.samples:
                half = len(sampler.samples) // 2 or 1
                first, second = sampler.samples[:half], sampler.samples[half:] or sampler.samples[-1:]
                peak_m.add(max(sampler.samples))
                end_m.add(sampler.samples[-1])
                slope_m.add(ratio(sum(second) / len(second), max(sum(first) / len(first), 1)))
            lag = f"{sampler.samples[:3]}…{sampler.samples[-3:]}"
            log(f"    seal {'on ' if sealing else 'off'}: {rates[sealing]:7.0f} /s; lag samples {lag}")
        on_m.add(rates[True])
        off_m.add(rates[False])
        ratio_m.add(ratio(rates[True], rates[False]))
        bench.record("sealing", {"rep": rep, "on": rates[True], "off": rates[False], "unsealed_after": unsealed(),
                                 "consumed": seed.count_consumed_resumes()})  # fmt: skip
