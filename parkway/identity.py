"""Who this process is, as a person reads it: recorded with the terminal state it commits (``runs.finished_on``)."""

from __future__ import annotations

import os
import socket

_node: list[str] = []  # the Celery worker's node name, once this process knows it is one


def name_node(node: str) -> None:
    """This process is the Celery worker ``node`` (or a pool child it forks later)."""
    _node[:] = [node]


def label() -> str:
    """``<node> pid <pid>``: the worker's node name (else this host's name) and the pid, read now (a pool
    child forked after ``name_node`` has a pid of its own)."""
    return f"{_node[0] if _node else socket.gethostname()} pid {os.getpid()}"
