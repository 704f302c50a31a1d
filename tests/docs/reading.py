"""The docs past the README's walkthrough, read on in its terminal against its stack (issue 43 item 1).

``tests/cli/test_walkthrough.py`` calls ``read_on`` once the walkthrough is done: every block marked
``runs: after the walkthrough`` or ``saved: PATH`` (tests/docs/snippets.py), in reader order, in the walkthrough's
bash, with the tokens of its ``make run`` pasted where a block says ``pk_...``. Before each block the stack has
settled, as it has for a person who reads on: no run is still ``running`` (each has parked or ended). A block's
``text`` output is waited for (a process it started in the background prints it later), compared as the
walkthrough compares. A block that is ``make run`` with settings before it is Ctrl-C and that command: the stack
restarted with those settings, the shell's URLs pointed at it.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import httpx

from tests.cli.support import Up, embedded_env, free_port
from tests.cli.walkthrough import README_API, TOKEN_LINE, Shell, assert_prints
from tests.docs import snippets
from tests.support import ROOT, wait_for

if TYPE_CHECKING:
    from tests.docs.snippets import Block

WAIT_S = 120  # a run parked or ended, a background process's output: on a loaded two-core machine
BLOCK_S = 300  # one block: `make ts-pack` and tsc, four CLI commands, on that machine
RESTART = re.compile(r"((?:[A-Z_]+=\S+ )+)make run")
RECEIVER = "8600"  # the README's webhook receiver's port, put on a free one here


class Stack(Protocol):
    up: Up | None

    def stop(self) -> None: ...

    def start(self, settings: dict[str, str]) -> Up: ...


def checkout(path: Path) -> Path:
    """A directory the docs' commands run in as in a checkout: this one's virtualenv, Makefile and clients
    (``make ts-pack`` packs the client there), and a copy of examples/go (the Go README builds in it)."""
    path.mkdir()
    (path / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    for name in ("Makefile", "clients"):
        (path / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / "examples" / "go", path / "examples" / "go", ignore=shutil.ignore_patterns("worker"))
    return path


def terminal(tmp_path: Path, **settings: str) -> dict[str, str]:
    """The walkthrough terminal's environment: nothing of Parkway's configured but ``settings``; Go's caches
    here and no module download (the example has no dependency); npm offline (the client has none)."""
    go = {"GOCACHE": str(tmp_path / "gocache"), "GOPATH": str(tmp_path / "gopath"), "GOPROXY": "off",
          "GOFLAGS": "", "GOTOOLCHAIN": "local"}  # fmt: skip
    return embedded_env(**settings, **go, npm_config_offline="true", npm_config_cache=str(tmp_path / "npm"))


def pack_the_client() -> None:
    """``make ts-pack`` in this checkout, one at a time: a module running at once waits, then finds it done (the
    TypeScript README's own ``make ts-pack`` then has nothing to do)."""
    with open(ROOT / "clients" / "typescript" / "package.json") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(["make", "-s", "ts-pack"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"make ts-pack: exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def read_on(shell: Shell, stack: Stack, tokens: dict[str, str]) -> None:
    """Every block past the walkthrough, in reader order (tests/docs/snippets.py ``after_walkthrough``)."""
    pack_the_client()
    port = str(free_port())
    shell.replace.update({f"127.0.0.1:{RECEIVER}": f"127.0.0.1:{port}", f"--port {RECEIVER}": f"--port {port}"})
    for block in snippets.after_walkthrough():
        began = time.monotonic()
        settle(stack, tokens["admin"])
        if block.claim == "saved":
            (Path(shell.run("pwd")) / block.detail).write_text(block.text)
        elif (restart := RESTART.fullmatch(block.text.strip())) is not None:
            restart_with(shell, stack, dict(re.findall(r"([A-Z_]+)=(\S+)", restart.group(1))))
        else:
            run(shell, block, tokens)
        print(f"{block}: {time.monotonic() - began:.1f} s")  # where the module's time goes (pytest -s)


def run(shell: Shell, block: Block, tokens: dict[str, str]) -> None:
    """The block as printed (the tokens pasted), and what it shows it prints, once printed."""
    start = shell.offset()
    shell.run(TOKEN_LINE.sub(lambda m: f"{m.group(1)}_TOKEN={tokens[m.group(1).lower()]}", block.text), timeout=BLOCK_S)
    if block.shown is None:
        return

    def as_in_the_docs() -> str:
        printed = shell.printed_since(start)
        for readme, actual in shell.replace.items():
            printed = printed.replace(actual, readme)
        return printed

    def shown() -> bool:
        try:
            assert_prints(block.shown or "", as_in_the_docs())
        except AssertionError:
            return False
        return True

    try:
        wait_for(shown, timeout=WAIT_S, what=f"{block} to print what the doc shows")
    except AssertionError as timeout:
        assert_prints(block.shown, as_in_the_docs())  # what differs
        raise timeout


def restart_with(shell: Shell, stack: Stack, settings: dict[str, str]) -> None:
    """Ctrl-C in the first terminal, then ``make run`` with ``settings``: it starts where it stopped."""
    stack.stop()
    up = stack.start(settings)
    assert "pk_" not in up.stdout(), "a later start prints no tokens"
    shell.replace[README_API] = up.api


def settle(stack: Stack, admin: str) -> None:
    """Wait until no run is ``running``: each started one has parked or ended."""
    assert stack.up is not None
    with httpx.Client(base_url=stack.up.api, headers={"Authorization": f"Bearer {admin}"}, timeout=30) as http:

        def running() -> list[object]:
            listed = http.get("/v1/runs", params={"status": "running"})
            assert listed.status_code == 200, listed.text
            items: list[object] = listed.json()["items"]
            return items

        wait_for(lambda: not running(), timeout=WAIT_S, what="every run started to park or end")
