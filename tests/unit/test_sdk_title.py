"""``ctx.set_title``: a line a person reads, checked where the step says it (issue 35 §5)."""

from __future__ import annotations

import pytest

from tasks.sdk import Context, WorkflowError


@pytest.mark.parametrize("bad", ["", "   ", "x" * 201, "a\x00b", 7])
def test_set_title__refuses_what_is_not_one_line_of_1_to_200_characters(bad: object) -> None:
    ctx = Context(run_id="r", step_id="s", attempt=1, execution_id="e")
    with pytest.raises(WorkflowError, match="title"):
        ctx.set_title(bad)  # type: ignore[arg-type]
    assert ctx.commit_hooks == []


def test_set_title__is_written_with_the_step_s_commit_as_one_line() -> None:
    ctx = Context(run_id="r", step_id="s", attempt=1, execution_id="e")
    ctx.set_title("Deploy\n  billing")
    assert len(ctx.commit_hooks) == 1  # runs in the commit's transaction (tests/pages: the card shows it)
