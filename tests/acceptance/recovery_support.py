"""Workers handed on from one test of a module to the next (tests/acceptance/test_recovery.py, test_served.py).

A worker start is most of what these tests cost in CPU (Celery's, kombu's and SQLAlchemy's imports). Many tests of
these modules begin by starting a worker only to park runs before they stop it with a signal, and many end
with a worker that completed their runs, killed unused. A test that ends with such a worker hands it on
(``Relay.hand_on``); the next test that begins by needing a worker of that kind takes it (``Relay.take``)
instead of starting its own. Run alone, or after a test that handed nothing on, a test starts its own: each
test still passes on its own. Every other worker is stopped before and after each test, as ``own_workers``
does (a leftover would take the next test's messages); a handed-on worker is stopped too before a test that
does not take it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import text

from tests.proxy import Proxy
from tests.support import Stack, Worker, read_now, wait_for

# Live workers that run a step or continuation key (of the ``workers`` advertisements).
LIVE_RUNNING = text(
    "SELECT count(*) FROM workers WHERE expires_at > now() AND (:key = ANY(steps) OR :key = ANY(continuations))"
)


@dataclass
class Handed:
    """A worker a test handed on, and the proxy it reaches the database through, if any."""

    worker: Worker
    proxy: Proxy | None = None

    def drop(self) -> None:
        self.worker.kill()
        if self.proxy is not None:
            self.proxy.cut()


@dataclass
class Relay:
    """The workers tests handed on, by kind, for the next test that takes one; a module's tests share it."""

    stack: Stack
    handed: dict[str, Handed] = field(default_factory=dict)

    def take(self, kind: str, start: Callable[[], Worker]) -> Worker:
        """The worker of ``kind`` the previous test handed on, if it is still alive, else a new one."""
        handed = self.take_handed(kind)
        return handed.worker if handed is not None else start()

    def take_handed(self, kind: str) -> Handed | None:
        handed = self.handed.pop(kind, None)
        if handed is not None and not handed.worker.alive():
            handed.drop()
            return None
        return handed

    def hand_on(self, kind: str, worker: Worker, proxy: Proxy | None = None) -> None:
        """``worker`` (and its ``proxy``) left running for the next test that takes a worker of ``kind``."""
        self.handed[kind] = Handed(worker, proxy)

    def before_test(self, taken: Iterable[str]) -> None:
        """Every worker stopped but those handed on of the kinds the test takes."""
        for kind in set(self.handed) - set(taken):
            self.handed.pop(kind).drop()
        self.after_test()

    def after_test(self) -> None:
        """Every worker stopped but those handed on."""
        kept = [handed.worker for handed in self.handed.values()]
        for worker in self.stack.workers:
            if worker.alive() and not any(worker is k for k in kept):
                worker.kill()

    def close(self) -> None:
        self.before_test(())


def wait_not_live(key: str) -> None:
    """No live worker advertises ``key`` any more (the heartbeat of a killed one ran out)."""
    wait_for(lambda: read_now(LIVE_RUNNING, key=key) == 0, timeout=30, what=f"no live worker running {key}")


def relay_fixtures(takes: dict[str, tuple[str, ...]]) -> tuple[Any, Any]:
    """A module's fixtures: ``relay``, shared by its tests, and ``own_workers`` (autouse): no worker outlives
    the test that started it but those it hands on, and those only to a test that takes them: one that asks
    for a fixture named in ``takes`` (fixture name -> the kinds it takes). Assign them to names of the module."""

    @pytest.fixture(scope="module", name="relay")
    def relay_fixture(stack: Stack) -> Iterator[Relay]:
        relay = Relay(stack)
        yield relay
        relay.close()

    @pytest.fixture(autouse=True, name="own_workers")
    def own_workers(relay: Relay, request: pytest.FixtureRequest) -> Iterator[None]:
        relay.before_test(kind for name, kinds in takes.items() if name in request.fixturenames for kind in kinds)
        yield
        relay.after_test()

    return relay_fixture, own_workers
