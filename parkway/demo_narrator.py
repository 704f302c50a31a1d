"""The narrator of ``parkway demo``: a timeline of what happened (seconds since the start), every claim a
check (✓/✗), and the summary table the exit code follows."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO, TypeVar

T = TypeVar("T")


class DemoFailed(Exception):
    """A check the rest of the story depends on did not hold."""


@dataclass
class Check:
    label: str
    ok: bool


class Narrator:
    """Prints the timeline (seconds since the start) and keeps the checks for the summary."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.started = time.monotonic()
        self.started_at = datetime.now(UTC)
        self.checks: list[Check] = []
        self.ok_mark, self.bad_mark = "✓", "✗"
        try:
            "✓✗…→─".encode(getattr(out, "encoding", None) or "ascii")
        except (UnicodeEncodeError, LookupError):
            self.ok_mark, self.bad_mark = "+", "x"
            reconfigure = getattr(out, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors="replace")

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def line(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def say(self, text: str, *details: str) -> None:
        self.line(f"{self.elapsed():6.1f}s    {text}")
        for detail in details:
            self.line(f"{'':12}{detail}")

    def check(self, ok: bool, text: str, *details: str, label: str = "", failure: Sequence[str] = ()) -> bool:
        """One claim of the story: a timeline line with ✓ or ✗, and a row of the summary (``label``)."""
        self.checks.append(Check(label=label or text, ok=bool(ok)))
        mark = self.ok_mark if ok else self.bad_mark
        self.line(f"{self.elapsed():6.1f}s  {mark} {text}")
        for detail in [*details, *([] if ok else failure)]:
            self.line(f"{'':12}{detail}")
        return bool(ok)

    def require(self, ok: bool, text: str, *details: str, label: str = "", failure: Sequence[str] = ()) -> None:
        """A check the rest of the story depends on: the demo stops when it does not hold."""
        if not self.check(ok, text, *details, label=label, failure=failure):
            raise DemoFailed(label or text)


def wait_until(condition: Callable[[], T], timeout: float, interval: float = 0.1) -> T | None:
    """Poll until ``condition()`` is truthy (returned) or the timeout passes (``None``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(interval)


def short(identifier: str) -> str:
    return identifier[:8] + "…" if len(identifier) > 9 else identifier


def brief_value(value: Any) -> str:
    if isinstance(value, str):
        return short(value) if len(value) >= 24 and " " not in value else value
    return json.dumps(value)[:60]


def summary(narrator: Narrator, *, finished: bool) -> bool:
    """The checks as a table; true only if the story finished and every check held."""
    n = narrator
    n.line()
    n.line("summary")
    for number, check in enumerate(n.checks, 1):
        n.line(f"  {number:>2}  {n.ok_mark if check.ok else n.bad_mark}  {check.label}")
    held = sum(c.ok for c in n.checks)
    ok = finished and held == len(n.checks) and held > 0
    verdict = "every check held" if ok else "NOT every check held" if finished else "the story did not finish"
    n.line(f"{held}/{len(n.checks)} checks held in {n.elapsed():.1f}s: {verdict}")
    return ok
