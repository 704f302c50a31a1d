"""The README's walkthrough as data, and a shell to run its commands in, as a person in a terminal does.

The walkthrough is the README section whose title starts with ``WALKTHROUGH``; its ``### N. …`` headings
are its steps. In a step, each ``sh`` block is a command to run and a ``text`` block after it (before the
next ``sh`` block) is what that command prints: ``…`` on a line of its own stands for lines left out, and tokens, ids,
timestamps and pids are compared by their shape only (every run makes new ones).
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import ROOT, wait_for

WALKTHROUGH = "## Walkthrough"
README_API, README_FLOWER, README_HOME = "http://127.0.0.1:8000", "http://127.0.0.1:5555", "/home/you/parkway/var"
README_WORKSPACES = "var/workspaces"  # the default home's workspaces, as the README's commands name them
ELIDED = "…"
MARKER = "walkthrough-done-"  # a line the shell prints after each command: where its output ends
SHAPES = (
    (re.compile(r"\bpk_[A-Za-z0-9_-]{20,}"), "pk_<token>"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "<id>"),
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "<time>"),
    (re.compile(r"\bpid \d+"), "pid <n>"),
    (re.compile(r"\bgo-triage-\S+-\d+\b"), "go-triage-<host>-<pid>"),  # the Go example's worker, by host and pid
)
TOKEN_LINE = re.compile(r"^([A-Z]+)_TOKEN=pk_\.\.\.(?=\s|$)", re.MULTILINE)
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)


@dataclass
class Command:
    """One ``sh`` block, and the output the README shows for it (``None``: none shown)."""

    script: str
    shown: str | None = None


@dataclass
class Step:
    number: int
    title: str
    text: str
    commands: list[Command] = field(default_factory=list)


def steps(readme: Path = ROOT / "README.md") -> dict[int, Step]:
    """The walkthrough's steps by number."""
    text = readme.read_text(encoding="utf-8")
    start = text.index(f"\n{WALKTHROUGH}")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end > 0 else len(text)]
    found: dict[int, Step] = {}
    for part in re.split(r"^(?=### )", section, flags=re.MULTILINE)[1:]:
        heading = re.match(r"### (\d+)\. (.+)", part)
        assert heading is not None, f"a walkthrough step without a number: {part.splitlines()[0]}"
        step = Step(int(heading.group(1)), heading.group(2).strip(), part)
        for block in BLOCK.finditer(part):
            language, body = block.group(1), block.group(2)
            if language == "sh":
                step.commands.append(Command(body))
            elif language == "text":
                assert step.commands and step.commands[-1].shown is None, f"step {step.number}: output of what?"
                step.commands[-1].shown = body
            else:
                raise AssertionError(f"step {step.number}: a ```{language} block the walkthrough cannot run")
        found[step.number] = step
    return found


def shape(text: str) -> list[str]:
    """The lines of ``text`` with what differs from run to run replaced by what it is."""
    for pattern, name in SHAPES:
        text = pattern.sub(name, text)
    return [line.rstrip() for line in text.rstrip("\n").splitlines()]


def assert_prints(shown: str, printed: str) -> None:
    """What the README shows is what was printed: all of it (in any order: the API lists what was made in
    one instant in no fixed order), or, where it shows ``…``, its lines in order among the printed ones."""
    want, got = shape(shown), shape(printed)
    if ELIDED not in want:
        assert sorted(got) == sorted(want), f"the README shows:\n{shown}\nthe command printed:\n{printed}"
        return
    rest = iter(got)
    missing = [line for line in want if line != ELIDED and not any(line == seen for seen in rest)]
    assert not missing, f"not printed (in this order): {missing}\nthe command printed:\n{printed}"


class Shell:
    """One bash, as in a terminal: its variables carry from one command to the next; it stops at the
    first command that fails (``set -euo pipefail``). Output (stdout and stderr, interleaved) goes to a file,
    what it starts in the background too; closing it ends them all (its process group)."""

    def __init__(self, cwd: Path, env: dict[str, str], replace: dict[str, str]) -> None:
        self.cwd, self.replace = cwd, replace
        self.out = cwd / "shell.out"
        self.scripts = cwd / "scripts"
        self.scripts.mkdir()
        with open(self.out, "wb") as sink:
            self.proc = subprocess.Popen(
                ["bash", "--noprofile", "--norc"],
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=sink,
                stderr=sink,
                start_new_session=True,
            )
        self.count = 0
        self._send("set -euo pipefail")

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{line}\n".encode())
        self.proc.stdin.flush()

    def run(self, script: str, *, timeout: float = 60) -> str:
        """Run a block as the README has it (its URLs pointing at this stack); what it printed."""
        for old, new in self.replace.items():
            script = script.replace(old, new)
        self.count += 1
        path = self.scripts / f"{self.count:02d}.sh"
        path.write_text(script)
        marker = f"{MARKER}{secrets.token_hex(6)}"
        start = self.offset()
        # stdin from /dev/null: a command that reads it must not swallow the next block
        self._send(f"source {path} < /dev/null; printf '\\n{marker}\\n'")

        def finished() -> list[str] | None:  # a list: an empty output is an answer too
            printed = self.out.read_bytes()[start:].decode(errors="replace")
            if f"\n{marker}\n" in printed:
                return [printed[: printed.index(f"\n{marker}\n")]]
            if self.proc.poll() is not None:
                raise AssertionError(f"this command failed (bash exit {self.proc.returncode}):\n{script}\n{printed}")
            return None

        [printed] = wait_for(finished, timeout=timeout, what=f"the walkthrough's command to finish:\n{script}")
        return printed.removesuffix("\n")

    def offset(self) -> int:
        """Where the output printed from now on starts."""
        return self.out.stat().st_size

    def printed_since(self, offset: int) -> str:
        """What was printed from ``offset`` on (the background's too), without the lines that end each command
        and without blank lines."""
        printed = self.out.read_bytes()[offset:].decode(errors="replace").splitlines()
        return "".join(f"{line}\n" for line in printed if line.strip() and not line.startswith(MARKER))

    def value(self, name: str) -> str:
        """A variable the commands so far have set."""
        return self.run(f'printf "%s\\n" "${name}"')

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        with suppress(ProcessLookupError):  # what a block left running in the background
            os.killpg(self.proc.pid, signal.SIGKILL)
