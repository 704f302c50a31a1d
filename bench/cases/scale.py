"""Scale (issue 31 §3): the lists, pages, idle sweep and answer path at 10³, 10⁵ (and 10⁶) pending waits.

One database grows from one size to the next (``bench.seed_waits``: the store's rows and events, waits
spread over 50 targets); at each size, after ``VACUUM ANALYZE`` and a checkpoint, a real API and worker
are timed on the same figures. The ratios largest ÷ smallest are the targets (≤ 1.5 for every list, page
and idle sweep), measured in one run.
"""

from __future__ import annotations

import contextlib
import html
import http.client
import json
import re
import secrets
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
from sqlalchemy import text

from bench import seed, seed_waits
from bench.cases.common import Bench, check_workers, ratio
from bench.cases.httpapi import api_server
from bench.cases.sweep import use_database
from bench.harness import log, proc_memory
from bench.stats import percentile
from models import principals, store
from models.base import utcnow
from parkway.db import get_engine, transaction
from parkway.tokens import hash_token

HUMAN, ADMIN = "scale-human", "scale-admin"
PAGES = 10  # the "10th page" figures follow ``next`` nine times first
SWEEP_PASSES_PER_REP = 3
OLDER = re.compile(r'id="older" href="([^"]+)"')


class Timed:
    """One keep-alive connection to the API; each request's time to its first byte and to its last."""

    def __init__(self, base: str, headers: dict[str, str]) -> None:
        host, port = base.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=120)
        self.headers = headers

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes, float, float]:
        data = None if body is None else json.dumps(body).encode()
        headers = self.headers | ({"Content-Type": "application/json"} if data else {})
        for attempt in (1, 2):  # uvicorn closes a connection idle for 5 s: open it again, once
            started = time.perf_counter()
            try:
                self.conn.request(method, path, body=data, headers=headers)
                response = self.conn.getresponse()
                break
            except (http.client.RemoteDisconnected, ConnectionError):
                self.conn.close()
                if attempt == 2:
                    raise
        first = time.perf_counter()
        raw = response.read()
        done = time.perf_counter()
        if response.status >= 400 and response.status not in (404, 405):
            raise RuntimeError(f"{method} {path}: {response.status} {raw[:300]!r}")
        return response.status, raw, (first - started) * 1000, (done - started) * 1000

    def json_next(self, path: str) -> str | None:
        """The path of the page after this JSON list page (``None`` at the end)."""
        cursor = json.loads(self.request("GET", path)[1])["next"]
        return None if cursor is None else f"{path.split('&cursor=')[0]}&cursor={cursor}"

    def html_next(self, path: str) -> str | None:
        """The path behind the "Older runs" link of a /runs page (``None`` at the end)."""
        found = OLDER.search(self.request("GET", path)[1].decode())
        return html.unescape(found.group(1)) if found else None

    def nth(self, path: str, follow: Callable[[str], str | None]) -> str | None:
        for _ in range(PAGES - 1):
            path = follow(path) or ""
            if not path:
                return None
        return path


def actors(engine: Any) -> dict[str, str]:
    """The bench agent granted on every scale target (the sweep's authority check then keeps its runs), a
    human granted on all 50, an admin; returns the bearer tokens and page-session cookies of both people."""
    out: dict[str, str] = {}
    with transaction() as session:
        agent = store.principal_by_name(session, seed.AGENT)
        assert agent is not None
        for target in seed_waits.TARGETS:
            store.create_grant(session, principal_id=agent.id, target=target)
        for kind, name in (("human", HUMAN), ("admin", ADMIN)):
            token = "pk_scale_" + uuid.uuid4().hex
            made = store.create_principal(session, kind=kind, name=name, token_hash=hash_token(token))
            assert made is not None, f"principal {name} exists already"
            if kind == "human":
                for target in seed_waits.TARGETS:
                    store.create_grant(session, principal_id=made.id, target=target)
            sid = "ps_" + secrets.token_urlsafe(32)
            assert principals.start_page_session(session, token_hash=hash_token(token), session_id=sid)
            out[name] = token
            out[f"{name}.cookie"] = f"parkway_session={sid}; parkway_nonce={secrets.token_urlsafe(16)}"
    return out


def grow(engine: Any, owner: tuple[str, str], *, have: int, size: int, base: Any) -> float:
    """Add waits ``have + 1 … size``, then ``VACUUM ANALYZE`` and a checkpoint; returns the seconds."""
    started = time.perf_counter()
    step = 100_000
    for lo in range(have + 1, size + 1, step):
        seed_waits.bulk_waits(engine, owner, first=lo, last=min(lo + step - 1, size), base=base)
        if size - have > step:
            log(f"    seeded {min(lo + step - 1, size):,}/{size:,} waits")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
        conn.execute(text("CHECKPOINT"))  # the load's writes out before anything is timed (see the sweep case)
    return time.perf_counter() - started


def completed_after_answer(client: Timed, run_id: str, interaction_id: str, poll: psycopg.Connection[Any]) -> float:
    """Answer over HTTP; the time until the run reads ``completed`` (a real worker resumed it)."""
    started = time.perf_counter()
    body = {"response_id": uuid.uuid4().hex, "value": "yes"}
    status = client.request("POST", f"/v1/interactions/{interaction_id}/answer", body)
    assert status[0] == 200, status
    deadline = started + 60
    while time.perf_counter() < deadline:
        row = poll.execute("SELECT status FROM runs WHERE id = %s", (run_id,)).fetchone()
        if row and row[0] == "completed":
            return (time.perf_counter() - started) * 1000
        time.sleep(0.002)
    raise RuntimeError(f"run {run_id} not completed 60 s after its answer")


def measure(
    bench: Bench, urls: tuple[str, str], who: dict[str, str], size: int, answered: int
) -> dict[str, list[float]]:
    """Every figure at one size: ``reps`` x ``samples`` of each, the sweep ``reps`` x 3 passes."""
    from beat.sweep import run_sweep

    args = bench.args
    base_url, database_url = urls
    human = Timed(base_url, {"Authorization": f"Bearer {who[HUMAN]}"})
    admin = Timed(base_url, {"Authorization": f"Bearer {who[ADMIN]}"})
    human_page = Timed(base_url, {"Cookie": who[f"{HUMAN}.cookie"]})
    admin_page = Timed(base_url, {"Cookie": who[f"{ADMIN}.cookie"]})
    pending = "/v1/interactions?status=pending&limit=50"
    paths: dict[str, tuple[Timed, str | None, int]] = {}  # figure -> client, path, 1 (time to first byte) or 3
    for label, client in (("human, 50 grants", human), ("admin", admin)):
        paths[f"GET /v1/interactions?status=pending, 1st page ({label})"] = (client, pending, 3)
        paths[f"GET /v1/interactions?status=pending, 10th page ({label})"] = (
            client, client.nth(pending, client.json_next), 3,
        )  # fmt: skip
        listed = client.request("GET", "/v1/runs?status=waiting")[0] not in (404, 405)
        runs = "/v1/runs?status=waiting" if listed else None
        paths[f"GET /v1/runs?status=waiting, 1st page ({label})"] = (client, runs, 3)
        paths[f"GET /v1/runs?status=waiting, 10th page ({label})"] = (
            client, runs and client.nth(runs, client.json_next), 3,
        )  # fmt: skip
    paths["GET /decisions, 50 prompts, first byte (human)"] = (human_page, "/decisions", 2)
    paths["GET /decisions?view=all, 50 prompts, first byte (admin)"] = (admin_page, "/decisions?view=all", 2)
    for label, client in (("human", human_page), ("admin", admin_page)):
        paths[f"GET /runs?status=waiting page, 1st ({label})"] = (client, "/runs?status=waiting", 2)
        paths[f"GET /runs?status=waiting page, 10th ({label})"] = (
            client, client.nth("/runs?status=waiting", client.html_next), 2,
        )  # fmt: skip
    out: dict[str, list[float]] = {name: [] for name in paths}
    out |= {"GET /v1/runs/{id}": [], "answer → run completed": [], "sweep pass, nothing due": []}
    for name, (_, path, _) in paths.items():
        if path is None:
            bench.skipped[f"scale: {name}"] = "not served by this API (404/405), or fewer than 10 pages"
    poll = psycopg.connect(database_url.replace("+psycopg", ""), autocommit=True)
    try:
        for rep in range(args.scale_reps):
            check_workers(bench.services)
            for name, (client, path, part) in paths.items():
                if path is not None:
                    client.request("GET", path)  # warm: the first request after the last one's plan
                    out[name] += [client.request("GET", path)[part] for _ in range(args.scale_samples)]
            for g in [1 + (size * k) // args.scale_samples for k in range(args.scale_samples)]:
                status, _, _, ms = human.request("GET", f"/v1/runs/{seed_waits.wait_id('runs', g)}")
                assert status == 200, status
                out["GET /v1/runs/{id}"].append(ms)
            for _ in range(SWEEP_PASSES_PER_REP):
                report = run_sweep()
                if any(report.counts.values()):
                    log(f"    WARNING: a pass meant to find nothing due did something: {report.line()}")
                out["sweep pass, nothing due"].append(report.duration_s * 1000)
            for _ in range(args.scale_samples):
                # The newest waits: the oldest-first lists' first ten pages stay as they were.
                g = size - answered
                answered += 1
                ids = seed_waits.wait_id("runs", g), seed_waits.wait_id("interactions", g)
                out["answer → run completed"].append(completed_after_answer(human, *ids, poll))
            log(f"    size {size:,}: rep {rep + 1}/{args.scale_reps} done")
    finally:
        poll.close()
        for client in (human, admin, human_page, admin_page):
            client.conn.close()
    return out


def rss(bench: Bench) -> dict[str, float]:
    """The API's and the workers' (main and pool children) resident memory now, in MB."""
    workers = [pid for w in bench.services.workers for pid in [w.proc.pid, *w.pool_children()]]
    return {
        "API RSS": proc_memory(bench.api_pid or 0).get("VmRSS", 0.0),
        "worker RSS (main + pool)": sum(proc_memory(pid).get("VmRSS", 0.0) for pid in workers),
    }


@contextlib.contextmanager
def scale_services(bench: Bench, url: str) -> Iterator[str | None]:
    """This process, a worker and the API on the scale database; the API's base URL (``None``: no API)."""
    services = bench.services
    main_url, before = services.env["PARKWAY_DATABASE_URL"], dict(services.env)
    services.env["PARKWAY_DATABASE_URL"] = url
    use_database(url)
    try:
        services.start_worker()
        with api_server(bench) as base:
            yield base
    finally:
        services.stop_workers()
        services.env.clear()
        services.env.update(before)
        use_database(main_url)


def case_scale(bench: Bench, url: str) -> None:
    """The figures of issue 31's table at each size, side by side, and the ratios largest ÷ smallest."""
    sizes = sorted(bench.args.scale_sizes)
    log(f"== scale: pending waits {', '.join(f'{s:,}' for s in sizes)}, one database grown from one to the next")
    figures: dict[int, dict[str, list[float]]] = {}
    storage: dict[int, float] = {}
    seeding: dict[int, float] = {}
    with scale_services(bench, url) as base:
        if base is None:
            bench.skipped["scale"] = bench.skipped.pop("throughput.http", "the API did not start")
            return
        engine = get_engine()
        seed.setup_actors()
        who = actors(engine)
        owner = (seed.principal_id(seed.AGENT), seed.AGENT)
        start = utcnow() - timedelta(days=30)
        have, answered = 0, 0
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))
        before = seed_waits.relation_bytes(engine)
        for size in sizes:
            seeding[size] = grow(engine, owner, have=have, size=size, base=start)
            after = seed_waits.relation_bytes(engine)
            storage[size] = (sum(after.values()) - sum(before.values())) / (size - have)
            bench.record("scale", {"size": size, "seed_s": seeding[size], "bytes": after, "bytes_before": before})
            events = (after["event_batches"] - before["event_batches"]) / (size - have)
            log(
                f"    {size - have:,} waits seeded in {seeding[size]:.1f}s; "
                f"{storage[size]:,.0f} B a wait (events {events:,.0f})"
            )
            before, have = after, size
            figures[size] = measure(bench, (base, url), who, size, answered)
            answered += bench.args.scale_reps * bench.args.scale_samples
            figures[size] |= {k: [v] for k, v in rss(bench).items()}
    report(bench, sizes, figures, storage, seeding)


def report(
    bench: Bench,
    sizes: list[int],
    figures: dict[int, dict[str, list[float]]],
    storage: dict[int, float],
    seeding: dict[int, float],
) -> None:
    """Metrics (medians, and the ratios as targets) and one table with the sizes side by side."""
    small, large = sizes[0], sizes[-1]
    head = [f"{s:,} waits" for s in sizes]
    lines = ["| figure | " + " | ".join(head) + f" | {large:,} ÷ {small:,} |", "|---" * (len(sizes) + 2) + "|"]
    bounded = ("GET /v1/interactions", "GET /v1/runs?", "GET /decisions", "GET /runs", "sweep")
    for name in figures[small]:
        if not any(figures[size][name] for size in sizes):
            lines.append(f"| {name} | not measured (see skipped) |" + " |" * len(sizes))
            continue
        cells = []
        for size in sizes:
            values = figures[size][name]
            metric = bench.metric("scale", f"{name}, {size:,} waits", "MB" if "RSS" in name else "ms")
            for v in values:
                metric.add(v)
            p99 = f" / {percentile(values, 99):.1f}" if "1st page" in name or name.startswith("GET /v1/runs/") else ""
            cells.append(f"{statistics.median(values):.1f}{p99}" if values else "-")
        r = ratio(*(statistics.median(figures[s][name]) if figures[s][name] else None for s in (large, small)))
        if large != small and r is not None:
            target = "<= 1.5" if name.startswith(bounded) else None
            bench.metric("scale", f"ratio {name}: {large:,} ÷ {small:,}", "x", target).add(r)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'-' if r is None else f'{r:.2f}'} |")
    per_wait = " | ".join(f"{storage[s]:,.0f}" for s in sizes)
    lines.append(f"| storage per wait added, bytes (5 tables with indexes and TOAST) | {per_wait} | |")
    seeded = " | ".join(f"{seeding[s]:.1f}" for s in sizes)
    lines.append(f"| seeding those waits, s (VACUUM ANALYZE and CHECKPOINT included) | {seeded} | |")
    table = "\n".join(lines)
    bench.record("scale", {"table": table})
    print("\n" + table + "\n(ms: median, and / p99 for first pages and run reads, over reps x samples)\n", flush=True)
