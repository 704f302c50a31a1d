"""Soak of the event stream (issue 17 §1): writer threads commit events in real store transactions with
random commit delays (now and then one held open longer than any time horizon, now and then one rolled
back) while two clients follow ``GET /v1/events/stream`` on a real ``uvicorn`` and reconnect at random
with ``Last-Event-ID``. Compared with ``SELECT seq FROM events`` (what each may see): nothing missing,
nothing twice, strictly increasing."""

from __future__ import annotations

import itertools
import json
import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from sqlalchemy import select

from models import store
from models.tables import Event, Run
from parkway.db import transaction
from tests.api.conftest import ADMIN, AGENT, HUMAN, Actors, ApiServer, make_actors
from tests.support import TARGET, wait_for

HIDDEN = "team:soak-hidden"  # runs the human may not see
WRITERS = 3
WRITE_S = 12.0
LONG_HOLD_S = 2.5  # longer than the time horizon readers used to take (2 s)
SEED = int(os.environ.get("PARKWAY_SOAK_SEED", str(random.SystemRandom().randrange(2**32))))


class Rollback(Exception):
    """Raised by a writer to roll its transaction back (its events must never be delivered)."""


@dataclass
class Consumer:
    """An SSE client that reads a random while, drops the connection and comes back with Last-Event-ID."""

    name: str
    url: str
    token: str
    rng: random.Random
    got: list[tuple[int, str]] = field(default_factory=list)  # (seq, run_id), in arrival order
    reconnects: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def last(self) -> int:
        return self.got[-1][0] if self.got else 0

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self._connection(budget=self.rng.randint(1, 120), until=time.monotonic() + self.rng.uniform(0.2, 3))
                self.reconnects += 1
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _connection(self, *, budget: int, until: float) -> None:
        headers = {"Authorization": f"Bearer {self.token}", "Last-Event-ID": str(self.last())}
        seq: int | None = None
        try:
            with (
                httpx.Client(base_url=self.url, timeout=httpx.Timeout(5, read=1.0)) as http,
                http.stream("GET", "/v1/events/stream", headers=headers) as response,
            ):
                assert response.status_code == 200, response.status_code
                for line in response.iter_lines():
                    if line.startswith("id: "):
                        seq = int(line[4:])
                    elif line.startswith("data: "):
                        assert seq is not None
                        self.got.append((seq, json.loads(line[6:])["run_id"]))
                        budget -= 1
                    if budget <= 0 or time.monotonic() > until or self.stop.is_set():
                        return  # drop the connection mid-stream, whatever the server already sent
        except httpx.ReadTimeout:
            return  # a quiet second: reconnect


def _writer(rng: random.Random, stop: threading.Event, runs: list[str], counts: dict[str, int]) -> None:
    with transaction() as session:
        owner = store.principal_by_name(session, AGENT)
        assert owner is not None
    while not stop.is_set():
        try:
            with transaction() as session:
                if not runs or rng.random() < 0.3:  # a run's start: two events in one transaction
                    run, _ = store.create_run(
                        session, workflow="t.ask_one", payload={}, owner=owner,
                        target=rng.choice([TARGET, HIDDEN]), idempotency_key=None, request_digest="soak",
                    )  # fmt: skip
                    made = run.id
                else:
                    made = None
                    run_id = rng.choice(runs)
                    for k in range(rng.randint(1, 4)):
                        store.append_event(session, run_id, "test.soak", k=k)
                        time.sleep(rng.uniform(0, 0.01))
                hold = LONG_HOLD_S if rng.random() < 0.03 else rng.uniform(0, 0.05)
                counts["long_holds"] += hold == LONG_HOLD_S
                time.sleep(hold)  # the commit delay: other writers commit meanwhile
                if rng.random() < 0.05:
                    raise Rollback
            counts["commits"] += 1
            if made is not None:
                runs.append(made)
        except Rollback:
            counts["rollbacks"] += 1


def _expected(visible_to_human: bool) -> list[int]:
    stmt = select(Event.seq).order_by(Event.seq)
    if visible_to_human:
        stmt = stmt.join(Run, Run.id == Event.run_id).where(Run.target == TARGET)
    with transaction() as session:
        return list(session.scalars(stmt))


@pytest.fixture(scope="module")
def actors(server: ApiServer) -> Iterator[Actors]:
    with server.client() as http:
        yield make_actors(http)


def test_event_stream_soak__every_event_once_in_order_to_every_consumer(server: ApiServer, actors: Actors) -> None:
    rng = random.Random(SEED)
    consumers = [
        Consumer("admin", server.url, actors.tokens[ADMIN], random.Random(rng.random())),
        Consumer("human", server.url, actors.tokens[HUMAN], random.Random(rng.random())),
    ]
    readers = [threading.Thread(target=c.run, name=f"sse-{c.name}", daemon=True) for c in consumers]
    for thread in readers:
        thread.start()

    stop = threading.Event()
    runs: list[str] = []
    counts = {"commits": 0, "rollbacks": 0, "long_holds": 0}
    writers = [
        threading.Thread(target=_writer, args=(random.Random(rng.random()), stop, runs, counts), daemon=True)
        for _ in range(WRITERS)
    ]
    for thread in writers:
        thread.start()
    time.sleep(WRITE_S)  # the soak's length: writers and consumers run meanwhile
    stop.set()
    for thread in writers:
        thread.join(timeout=30)
        assert not thread.is_alive()

    expected = {"admin": _expected(False), "human": _expected(True)}
    for consumer in consumers:
        top = expected[consumer.name][-1]
        wait_for(
            lambda c=consumer, t=top: c.error is not None or c.last() >= t,
            timeout=30,
            what=f"{consumer.name} caught up",
        )
        consumer.stop.set()
    for thread in readers:
        thread.join(timeout=20)

    print(f"\nevent stream soak (seed {SEED}): {WRITERS} writers, {counts['commits']} commits, "
          f"{counts['rollbacks']} rollbacks, {counts['long_holds']} held {LONG_HOLD_S} s, "
          f"{len(expected['admin'])} events ({len(expected['human'])} visible to the human)")  # fmt: skip
    problems = []
    for consumer in consumers:
        assert consumer.error is None, f"{consumer.name}: {consumer.error!r}"
        seqs = [seq for seq, _ in consumer.got]
        want = expected[consumer.name]
        missing = sorted(set(want) - set(seqs))
        extra = sorted(set(seqs) - set(want))
        twice = len(seqs) - len(set(seqs))
        ordered = all(a < b for a, b in itertools.pairwise(seqs))
        print(f"  {consumer.name}: {len(seqs)} received of {len(want)}, {consumer.reconnects} reconnects, "
              f"missing {len(missing)}, duplicated {twice}, not visible {len(extra)}, "
              f"strictly increasing {ordered}")  # fmt: skip
        if missing or extra or twice or not ordered:
            problems.append(f"{consumer.name}: missing {missing[:10]}, not visible {extra[:10]}, {twice} twice")
    assert problems == []
    assert all(c.reconnects > 0 for c in consumers)
