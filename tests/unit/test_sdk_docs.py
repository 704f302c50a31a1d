"""docs/sdk.md documents every public name of ``tasks.sdk`` (issue 35, item 4)."""

from __future__ import annotations

import re

from tasks import sdk
from tests.support import ROOT


def test_sdk_docs__every_name_of_tasks_sdk_all_is_documented() -> None:
    text = (ROOT / "docs" / "sdk.md").read_text()
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # a name only inside an example does not count
    missing = [name for name in sdk.__all__ if f"`{name}`" not in prose]
    assert not missing, f"docs/sdk.md does not document {missing}"
