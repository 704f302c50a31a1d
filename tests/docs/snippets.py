"""Every runnable block of the docs, as a reader meets them, and what makes each one tested (issue 43 item 1).

A block is a fenced block in ``sh``, ``python``, ``ts`` or ``go`` (other fences — ``text``, ``json``, a bare
one — show output, data or a picture). Each one is one of these, said by the HTML comment right above it
(the last non-blank line before its fence) unless it is in the README's walkthrough:

- in the README's walkthrough (``tests/cli/walkthrough.py``: its ``sh`` blocks, step by step): run by
  ``tests/cli/test_walkthrough.py`` against ``make run``'s stack, exactly as printed;
- ``<!-- runs: after the walkthrough -->``: a ``sh`` block run by that same test, in the walkthrough's shell
  (its tokens, its targets, its stack), after the walkthrough, in the order a reader meets them (``docs()``);
  a ``text`` block right after it is what it prints, at once or (a process it started in the background)
  soon after; a block that is ``make run`` with settings before it restarts the stack with them;
- ``<!-- saved: PATH -->``: a block the reader saves as PATH (in the terminal's current directory) at that
  point of the same order, for a later block to run;
- ``<!-- runs: imported -->``: a ``python`` block run as it is by a fresh interpreter of this virtualenv
  (``tests/docs/test_snippets.py``): an import, a module that defines and registers;
- ``<!-- runs: in the installed package (tests/acceptance/test_typescript_package.py) -->``: a ``ts`` block
  of the TypeScript client's README that test compiles with tsc and runs with plain Node, where the packed
  tarball is installed outside the checkout;
- ``<!-- file: PATH -->``: the block is PATH's text, all of it or a run of its lines (a formatter's
  ``# fmt: skip`` aside), and the tests that run PATH run it;
- ``<!-- illustrative: REASON -->``: not run, for the reason given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.cli import walkthrough
from tests.support import ROOT

RUNNABLE = ("sh", "python", "ts", "go")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
MARKER = re.compile(r"<!-- (runs|saved|file|illustrative): (.*?) -->")
AFTER_WALKTHROUGH = "after the walkthrough"
IMPORTED = "imported"
IN_THE_PACKAGE = "in the installed package (tests/acceptance/test_typescript_package.py)"
RUNS_AFTER = ("runs", AFTER_WALKTHROUGH)
SHOWN = re.compile(r"\n\n```text\n(.*?)^```$", re.DOTALL | re.MULTILINE)  # right after a block: its output
FMT_SKIP = re.compile(r"\s+# fmt: skip$", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    doc: str  # its path from the repository's root
    line: int  # of its opening fence
    language: str
    text: str
    claim: str | None  # "walkthrough", "runs", "saved", "file", "illustrative", or None: nothing said
    detail: str  # what the marker says after its kind: the file, the reason
    shown: str | None = None  # a ``text`` block right after it: what it prints

    def __str__(self) -> str:
        return f"{self.doc}:{self.line} ```{self.language}"


def docs() -> list[str]:
    """The docs whose blocks are checked, in the order a reader would take them."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "clients" / "typescript" / "README.md",
             *sorted((ROOT / "examples").glob("*/README.md"))]  # fmt: skip
    return [str(path.relative_to(ROOT)) for path in found]


def blocks(doc: str) -> list[Block]:
    """The runnable blocks of ``doc``, in order, each with what its marker (or place) says of it."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    walked = _walkthrough_span(text) if doc == "README.md" else (0, 0)
    found = []
    for fence in FENCE.finditer(text):
        if fence.group(1) not in RUNNABLE:
            continue
        before = text[: fence.start()].rstrip().rsplit("\n", 1)[-1]
        marker = MARKER.fullmatch(before.strip())
        if walked[0] <= fence.start() < walked[1]:
            claim, detail = "walkthrough", ""
        elif marker is not None:
            claim, detail = marker.group(1), marker.group(2).strip()
        else:
            claim, detail = None, ""
        line = text.count("\n", 0, fence.start()) + 1
        output = SHOWN.match(text, fence.end())
        shown = output.group(1) if output is not None else None
        found.append(Block(doc, line, fence.group(1), fence.group(2), claim, detail, shown))
    return found


def _walkthrough_span(text: str) -> tuple[int, int]:
    start = text.index(f"\n{walkthrough.WALKTHROUGH}")
    end = text.find("\n## ", start + 1)
    return start, end if end > 0 else len(text)


def after_walkthrough() -> list[Block]:
    """The blocks of every doc the walkthrough's test runs (or saves) after the walkthrough, in reader order."""
    return [b for doc in docs() for b in blocks(doc) if b.claim == "saved" or (b.claim, b.detail) == RUNS_AFTER]


def is_part_of(block: Block, path: Path) -> bool:
    """Whether the block is ``path``'s text, or a run of its whole lines (``# fmt: skip`` left out of both)."""
    body, whole = FMT_SKIP.sub("", block.text), FMT_SKIP.sub("", path.read_text(encoding="utf-8"))
    return body == whole or f"\n{body}" in f"\n{whole}"
