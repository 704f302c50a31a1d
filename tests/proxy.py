"""A TCP proxy in front of the test PostgreSQL, cut and restored as in a restart (tests of outages: the
shared server itself is never stopped)."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

from sqlalchemy.engine import make_url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proxy:
    """A TCP proxy on 127.0.0.1 to ``upstream`` (host and port, or a unix socket's path); ``cut`` closes every
    connection and refuses new ones."""

    def __init__(self, upstream: tuple[str, int] | str) -> None:
        self.upstream = upstream
        self.port = free_port()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self.accepted = 0

    def start(self) -> Proxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    restore = start

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._open = self._open, set()
        if listener is not None:
            self._close(listener)  # from now on a connect is refused
        for sock in sockets:
            self._close(sock)

    @staticmethod
    def _close(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in accept() or recv() on it
        sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = self._connect_upstream()
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    server.close()
                    return
                self._open.update((client, server))
                self.accepted += 1
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _connect_upstream(self) -> socket.socket:
        if isinstance(self.upstream, str):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.connect(self.upstream)
            except OSError:
                server.close()
                raise
            return server
        server = socket.create_connection(self.upstream, timeout=5)
        server.settimeout(None)
        return server

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def through_proxy(database_url: str) -> tuple[Proxy, str]:
    """A proxy (not started: a connect is refused until ``start``) to the database of ``database_url``, over
    its TCP port or, embedded, its unix socket; and the URL that reaches that database through it."""
    url = make_url(database_url)
    socket_dir = url.query.get("host")
    port = int(str(url.query.get("port") or url.port or 5432))
    if isinstance(socket_dir, str) and socket_dir.startswith("/"):  # the embedded PostgreSQL: a unix socket only
        proxy = Proxy(str(Path(socket_dir) / f".s.PGSQL.{port}"))
    else:
        proxy = Proxy((url.host or "127.0.0.1", port))
    url = url.difference_update_query(["host", "port"])
    return proxy, url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
