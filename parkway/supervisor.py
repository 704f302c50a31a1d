"""The supervisor of ``parkway up``: waits for every child to be ready, then keeps them running. A child
that dies after startup is restarted with a backoff (a line on stdout says so) until it has died too often
in a window; then, or on Ctrl-C / SIGTERM, or when one dies while starting, the caller stops everything."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from parkway.children import Child


@dataclass(frozen=True)
class RestartPolicy:
    """At most ``limit`` restarts of one child within ``window_s``; the wait before restart n (from 0)
    is ``backoff_s * 2**n``, capped at ``max_backoff_s``."""

    limit: int = 5
    window_s: float = 60.0
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def delay(self, recent: int) -> float:
        return float(min(self.backoff_s * 2**recent, self.max_backoff_s))


def exit_text(code: int | None) -> str:
    if code is None:
        return "not started"
    if code < 0:
        try:
            return f"by {signal.Signals(-code).name}"
        except ValueError:
            return f"by signal {-code}"
    return f"exit {code}"


class Supervisor:
    """Waits until every child is ready (printing each as it gets there), then until a signal, restarting
    a child that dies; returns 1 when the stack must stop for a child's sake, 0 on a signal."""

    def __init__(
        self,
        children: list[Child],
        ready_checks: dict[str, Callable[[], str | None]],  # None once ready, else why not yet
        ready_lines: dict[str, str],
        stop: dict[str, int],
        say: Callable[[str], None],
        policy: RestartPolicy | None = None,
    ) -> None:
        self.children, self.ready_checks, self.ready_lines = children, ready_checks, ready_lines
        self.stop, self.say = stop, say
        self.policy = policy or RestartPolicy()
        self.restarts: dict[str, list[float]] = {c.name: [] for c in children}
        self.due: dict[str, float] = {}  # child → when to start it again
        self.recovering: set[str] = set()  # restarted, not ready yet

    def run(self, *, started: float, timeout: float, where: str, announce: Sequence[str] = ()) -> int:
        pending = [c for c in self.children if c.proc is not None]
        deadline = started + timeout
        why: dict[str, str] = {}
        while pending and not self.stop["count"]:
            for child in list(pending):
                if not child.alive():
                    return self.died_starting(child)
                problem = self.ready_checks[child.name]()
                if problem is None:
                    pending.remove(child)
                    self.say(self.ready_lines[child.name])
                else:
                    why[child.name] = problem
            if pending and time.monotonic() > deadline:
                self.say(f"{', '.join(c.name for c in pending)} not ready after {timeout:g}s; stopping everything")
                for child in pending:
                    self.say(f"{child.name} not ready: {why[child.name]}")
                    self.print_tail(child)
                return 1
            time.sleep(0.1)
        if not self.stop["count"]:
            self.say(f"all up in {time.monotonic() - started:.1f}s on {where}; Ctrl-C stops everything")
            for line in announce:
                self.say(line)
        while not self.stop["count"]:
            for child in self.children:
                if not self.watch(child):
                    return 1
            time.sleep(0.2)
        self.say(f"{signal.Signals(self.stop['signum']).name} received")
        return 0

    def watch(self, child: Child) -> bool:
        """One look at a running child: restart it when due, note it ready again; false to stop everything."""
        name, now = child.name, time.monotonic()
        if name in self.due:
            if now >= self.due[name]:
                del self.due[name]
                child.restart()
                self.recovering.add(name)
                self.say(f"restarting {name} (pid {child.pid})…")
            return True
        if not child.alive():
            self.recovering.discard(name)
            return self.died(child, now)
        if name in self.recovering and self.ready_checks[name]() is None:
            self.recovering.discard(name)
            self.say(f"{self.ready_lines[name]} (again, after a restart)")
        return True

    def died(self, child: Child, now: float) -> bool:
        """Schedule the restart of a child that died, or say why the stack stops (too many restarts)."""
        child.wait_reader(1.0)
        policy, how = self.policy, exit_text(child.returncode)
        recent = [at for at in self.restarts[child.name] if now - at < policy.window_s]
        if len(recent) >= policy.limit:
            self.say(
                f"{child.name} exited unexpectedly ({how}) after {len(recent)} restarts within "
                f"{policy.window_s:g}s, the limit; stopping everything"
            )
            self.print_tail(child)
            return False
        delay = policy.delay(len(recent))
        self.restarts[child.name] = [*recent, now]
        self.due[child.name] = now + delay
        self.say(
            f"{child.name} exited unexpectedly ({how}); restarting it in {delay:g}s "
            f"(restart {len(recent) + 1} of at most {policy.limit} within {policy.window_s:g}s)"
            + (f"; its log: {child.log}" if child.log else "")
        )
        return True

    def died_starting(self, child: Child) -> int:
        child.wait_reader(1.0)
        self.say(f"{child.name} exited during startup with code {child.returncode}; stopping everything")
        self.print_tail(child)
        return 1

    def print_tail(self, child: Child) -> None:
        lines = child.tail()
        if lines:
            self.say(f"last lines of {child.name}:")
            for line in lines:
                self.say(f"  {line}")
