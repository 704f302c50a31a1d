"""Acceptance fixtures: tests that start their own workers stop every one of them, before and after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import Stack


@pytest.fixture
def own_workers(stack: Stack) -> Iterator[None]:
    """No worker outlives the test that started it (a leftover would take the next test's messages)."""
    stack.stop_all()
    yield
    stack.stop_all()
