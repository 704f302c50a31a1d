"""Every runnable block of the docs is run, or is the file a test runs, or says why not (issue 43 item 1;
the claims: tests/docs/snippets.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

from tests.cli import walkthrough
from tests.docs.snippets import AFTER_WALKTHROUGH, IMPORTED, IN_THE_PACKAGE, RUNNABLE, Block, blocks, docs, is_part_of
from tests.support import ROOT

EVERY = [block for doc in docs() for block in blocks(doc)]
MIN_REASON = 20  # characters: a reason says what runs instead, or what it would need


def test_every_block__is_run_or_is_a_tested_file_or_says_why_not() -> None:
    unsaid = [str(b) for b in EVERY if b.claim is None]
    assert not unsaid, "blocks neither run nor marked (<!-- illustrative: reason --> above each):\n" + "\n".join(unsaid)
    unreasoned = [str(b) for b in EVERY if b.claim == "illustrative" and len(b.detail) < MIN_REASON]
    assert not unreasoned, f"an illustrative block without its reason: {unreasoned}"
    runs = {(b.language, b.detail) for b in EVERY if b.claim == "runs"}
    assert runs <= {("sh", AFTER_WALKTHROUGH), ("python", IMPORTED), ("ts", IN_THE_PACKAGE)}, runs
    assert {b.language for b in EVERY} <= set(RUNNABLE)
    print("blocks by doc and claim:", dict(Counter((b.doc, b.claim) for b in EVERY)))


def test_walkthrough_blocks__are_the_commands_its_test_runs() -> None:
    walked = [b.text for b in EVERY if b.claim == "walkthrough"]
    steps = walkthrough.steps()
    assert walked == [command.script for step in steps.values() for command in step.commands]
    # tests/cli/test_walkthrough.py runs every command of steps 1, 2, 3, 5 and 6; step 4 is the browser's
    assert not steps[4].commands, "the walkthrough's step 4 has a command its test does not run"
    assert walked and {b.language for b in EVERY if b.claim == "walkthrough"} == {"sh"}


def test_file_blocks__are_the_files_they_name() -> None:
    filed: list[Block] = [b for b in EVERY if b.claim == "file"]
    assert filed
    for block in filed:
        path = ROOT / block.detail
        assert path.is_file(), f"{block}: no file {block.detail}"
        assert is_part_of(block, path), f"{block} is not the text of {block.detail}"


# Each block in a namespace of its own, in one fresh interpreter: the imports they share load once.
EACH = """import json, sys
for name, text in json.load(sys.stdin):
    print(name, flush=True)
    exec(compile(text, name, "exec"), {"__name__": "__main__"})
"""


def test_imported_blocks__run_in_a_fresh_interpreter() -> None:
    imported = [b for b in EVERY if b.claim == "runs" and b.detail == IMPORTED]
    assert imported
    blocks_in = json.dumps([(str(b), b.text) for b in imported])
    done = subprocess.run([sys.executable, "-c", EACH], input=blocks_in, cwd=ROOT, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    ran = done.stdout.splitlines()
    assert done.returncode == 0, f"{ran[-1] if ran else imported[0]}: exit {done.returncode}\n{done.stderr}"
    assert ran == [str(b) for b in imported]
