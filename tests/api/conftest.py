"""API fixtures: principals with real tokens (made over HTTP by an admin), a TestClient, a uvicorn server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

import tests.api.flows  # noqa: F401  (registers the API-only workflows in this process)
from models import store
from models.status import ContinuationStatus
from models.tables import Continuation
from parkway.db import transaction
from parkway.tokens import hash_token, new_token
from tasks.worker import execute
from tests import forkserver, support
from tests.proxy import free_port
from tests.support import PROBE, ROOT, TARGET, Stack, child_env, wait_for

AGENT, HUMAN, STRANGER, ADMIN, AGENT2 = "api-bot", "api-ana", "api-eve", "api-root", "api-bot2"


@dataclass
class Actors:
    """Bearer tokens by principal name, and the grant ids the fixture made."""

    tokens: dict[str, str]
    grants: dict[str, str] = field(default_factory=dict)

    def auth(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}


def make_admin(name: str = ADMIN) -> str:
    token = new_token()
    with transaction() as session:
        assert store.create_principal(session, kind="admin", name=name, token_hash=hash_token(token)) is not None
    return token


def make_actors(client: httpx.Client | TestClient) -> Actors:
    """An admin inserted in the store; every other principal and grant made through the API itself."""
    actors = Actors(tokens={ADMIN: make_admin()})
    admin = actors.auth(ADMIN)
    for kind, name in (("agent", AGENT), ("agent", AGENT2), ("human", HUMAN), ("human", STRANGER)):
        made = client.post("/v1/principals", json={"kind": kind, "name": name}, headers=admin)
        assert made.status_code == 201, made.text
        actors.tokens[name] = made.json()["token"]
    for name in (AGENT, AGENT2, HUMAN):
        grant = client.post("/v1/grants", json={"principal": name, "target": TARGET}, headers=admin)
        assert grant.status_code == 201, grant.text
        actors.grants[name] = grant.json()["id"]
    return actors


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[TestClient]:
    from api.app import app

    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def actors(client: TestClient) -> Actors:
    return make_actors(client)


def drive(run_id: str, *, rounds: int = 10) -> None:
    """Run the run's ready continuations in this process (what a worker would do), until none is ready."""
    for _ in range(rounds):
        with transaction() as session:
            ready = session.scalars(
                select(Continuation.id).where(
                    Continuation.run_id == run_id, Continuation.status == ContinuationStatus.READY
                )
            ).all()
        if not ready:
            return
        for continuation_id in ready:
            execute(continuation_id)


# --------------------------------------------------------------------------- a real uvicorn


@dataclass
class ApiServer:
    """``uvicorn api.app:app`` in a subprocess of its own process group."""

    database_url: str
    log: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | forkserver.Forked | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, wait: bool = True, **env: str | None) -> ApiServer:
        args = ["api.app:app", "--host", "127.0.0.1", "--port", str(self.port), "--timeout-graceful-shutdown", "5"]
        full_env = child_env(self.database_url, **env)
        if support.FORK_WORKERS:  # forked with its libraries imported, as the suite's workers are (tests/forkserver.py)
            self.proc = forkserver.spawn("uvicorn", args, env=full_env, cwd=ROOT, log=self.log, append=True)
        else:
            with open(self.log, "ab") as out:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "uvicorn", *args], cwd=ROOT, env=full_env, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
        if wait:
            try:
                wait_for(self.ready, timeout=40, what=f"uvicorn on {self.url}")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; its log ends:\n{self.text()[-3000:]}") from None
        return self

    def ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"uvicorn exited with {self.proc.returncode}:\n{self.text()[-3000:]}")
        try:
            return PROBE.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_exit(self, timeout: float = 40) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=20)

    def restart(self) -> None:
        self.stop()
        self.start()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kwargs.pop("timeout", 30), **kwargs)


@pytest.fixture(scope="module")
def server(stack: Stack) -> Iterator[ApiServer]:
    api = ApiServer(database_url=stack.database_url, log=stack.logs / "uvicorn.log").start()
    try:
        yield api
    finally:
        api.stop()
