"""The README's TypeScript agent is the example the stack tests run (clients/typescript/examples)."""

from __future__ import annotations

import re

from tests.support import ROOT


def test_readme__the_typescript_agent_is_the_tested_example() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## An agent in TypeScript", 1)[1]
    block = re.search(r"```ts\n(.*?)```", section, re.S)
    assert block, "README.md: no ```ts block under 'An agent in TypeScript'"
    example = (ROOT / "clients" / "typescript" / "examples" / "park-and-resume.ts").read_text()
    assert block.group(1) == example
