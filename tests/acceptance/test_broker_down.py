"""A broker that refuses connections costs an answer one connect attempt: the answer commits, its
receipt comes back, and the sweep relays the continuation once a broker is there (the row is the outbox)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.support import (
    HUMAN,
    Stack,
    continuations,
    effects,
    interactions,
    start,
    wait_parked,
    wait_status,
)

pytestmark = pytest.mark.usefixtures("own_workers")


class RefusingBroker:
    """A TCP port that accepts each connection and closes it at once (a broker that is not serving),
    counting the connection attempts made to it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.attempts = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: the test is over
                return
            self.attempts += 1
            conn.close()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def refusing_broker() -> Iterator[RefusingBroker]:
    broker = RefusingBroker()
    yield broker
    broker.close()


ANSWER = """
import json
from tasks.sdk import answer
receipt = answer({iid!r}, "ship", response_id="r-broker-down", principal={who!r})
print(json.dumps(receipt, default=str))
"""


def test_answer__broker_refusing__commits_publishes_once_and_the_sweep_relays(
    stack: Stack, refusing_broker: RefusingBroker
) -> None:
    # Given a run parked by a worker on the working broker
    stack.start_worker()
    run_id = start("t.ask_one")
    asked = wait_parked(run_id)
    # When a process whose broker refuses every connection answers it (as the API would)
    result = stack.run_python(ANSWER.format(iid=asked["go"].id, who=HUMAN), PARKWAY_BROKER_URL=refusing_broker.url)
    # Then it returns its receipt, having tried the broker exactly once and said so once at WARNING
    assert result.returncode == 0, result.stderr
    receipt = json.loads(result.stdout.strip().splitlines()[-1])
    assert receipt["status"] == "answered" and receipt["response_id"] == "r-broker-down"
    assert refusing_broker.attempts == 1
    assert result.stderr.count("publish failed") == 1, result.stderr
    assert "ship" not in result.stderr  # ids only, never the value
    # And the answer is committed, its continuation due (the outbox row) but never sent
    assert interactions(run_id)["go"].status == "answered"
    [resume] = [c for c in continuations(run_id) if c.kind == "resume"]
    assert resume.status == "ready"
    # And once the sweep runs against a working broker, the worker drives it to one commit
    run = wait_status(run_id, "completed", timeout=60, sweep=True)
    assert run.result == {"go": "ship"}
    assert effects(run_id, "one_done") == 1
