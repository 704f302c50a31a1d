"""The sender's connections against a real socket on 127.0.0.1: kept alive between requests, replaced once
when the receiver closed an idle one, dropped when an answer is cut; a request that reaches nobody is an
error, not an exception."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from tasks.webhook_http import Connections, client, post

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"


class Receiver:
    """A receiver on a raw socket: answers each request with ``answer``; after ``per_connection`` requests it
    closes the connection without saying so (as a receiver's idle timeout does)."""

    def __init__(self, *, per_connection: int, answer: bytes = OK) -> None:
        self.per_connection, self.answer = per_connection, answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with conn, conn.makefile("rb") as reader:
                try:
                    for _ in range(self.per_connection):
                        if not self.answer_one(conn, reader):
                            break
                except OSError:  # the sender hung up (a cut answer)
                    pass

    def answer_one(self, conn: socket.socket, reader: BinaryIO) -> bool:
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            line = reader.readline()
            if not line:
                return False
            head += line
        length = next(int(h.split(b":")[1]) for h in head.lower().split(b"\r\n") if h.startswith(b"content-length"))
        self.requests.append(reader.read(length))
        conn.sendall(self.answer)
        return True


@contextmanager
def receiver(**kwargs: object) -> Iterator[Receiver]:
    r = Receiver(**kwargs)  # type: ignore[arg-type]
    thread = threading.Thread(target=r.serve, daemon=True)
    thread.start()
    try:
        yield r
    finally:
        r.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() the thread waits in
        r.listener.close()


def send(sender: object, url: str, n: int) -> list[int | None]:
    return [post(sender, url, secrets=[SECRET], msg_id=f"msg_{i}", body=b'{"n":%d}' % i).status_code  # type: ignore[arg-type]
            for i in range(n)]  # fmt: skip


def test_connections__requests_share_one_kept_alive_connection() -> None:
    with receiver(per_connection=100) as r, client() as sender:
        assert send(sender, r.url, 5) == [200] * 5
    assert r.connections == 1
    assert r.requests == [b'{"n":%d}' % i for i in range(5)]


def test_connections__an_idle_connection_the_receiver_closed_is_replaced_once() -> None:
    with receiver(per_connection=1) as r, client() as sender:
        assert send(sender, r.url, 3) == [200, 200, 200]
    assert r.connections == 3
    assert r.requests == [b'{"n":%d}' % i for i in range(3)]  # each delivered once


def test_connections__an_answer_over_the_bound_is_cut_and_its_connection_dropped() -> None:
    big = b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n" + b"x" * 100_000
    with receiver(per_connection=100, answer=big) as r, client() as sender:
        sent = post(sender, r.url, secrets=[SECRET], msg_id="msg_big", body=b"{}", max_bytes=1000)
        assert (sent.status_code, sent.cut) == (200, True)
        assert send(sender, r.url, 1) == [200]  # on a new connection: the cut one is not reused
    assert r.connections == 2


def test_post__a_receiver_that_is_not_there_is_an_error() -> None:
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}/hook"
    with client() as sender:
        sent = post(sender, url, secrets=[SECRET], msg_id="msg_none", body=b"{}")
    assert sent.status_code is None and sent.error and "ConnectionRefused" in sent.error


def test_connections__a_connection_is_not_reused_past_its_age() -> None:
    defaults = client()
    with receiver(per_connection=100) as r, Connections(defaults.timeout_s, defaults.allowed, max_age_s=0) as sender:
        assert send(sender, r.url, 3) == [200, 200, 200]
    assert r.connections == 3  # each request resolved, checked and connected anew


def test_post__an_address_outside_the_allowed_networks_is_refused_before_connecting() -> None:
    with receiver(per_connection=100) as r, Connections(5.0, allowed=[]) as sender:
        sent = post(sender, r.url, secrets=[SECRET], msg_id="msg_private", body=b"{}")
    assert sent.status_code is None and sent.error and "loopback" in sent.error
    assert r.connections == 0
