"""``publish`` leaves to the sweep only what the broker or the transport failed: a bug raises, it is not a
WARNING line that the sweep would repeat for ever."""

from __future__ import annotations

import logging

import pytest
from kombu.exceptions import OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError

from tasks.celery_app import app
from tasks.publish import publish
from tests.conftest import BROKER


def _sends_raising(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    def send_task(*_: object, **__: object) -> None:
        raise exc

    monkeypatch.setattr(app, "send_task", send_task)


def test_publish__a_programming_error_propagates(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _sends_raising(monkeypatch, TypeError("send_task() got an unexpected keyword argument 'queu'"))
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        publish([("c-1", "resume")], retry=False)
    assert "publish failed" not in caplog.text


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
        ConnectionRefusedError(111, "Connection refused"),
        pytest.param(
            RedisConnectionError("Connection closed by server."),
            marks=pytest.mark.skipif(BROKER != "redis", reason="the Redis transport's own error"),
        ),
    ],
    ids=["kombu", "socket", "redis"],
)
def test_publish__a_broker_error_is_one_warning_and_left_to_the_sweep(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: BaseException
) -> None:
    _sends_raising(monkeypatch, error)
    with caplog.at_level(logging.WARNING, logger="parkway.publish"):
        assert publish([("c-1", "resume"), ("c-2", "start")], retry=False) == 0
    [line] = [r for r in caplog.records if r.name == "parkway.publish"]
    assert line.levelno == logging.WARNING and "publish failed" in line.getMessage()
    assert line.continuation_ids == ["c-1", "c-2"]  # type: ignore[attr-defined]
