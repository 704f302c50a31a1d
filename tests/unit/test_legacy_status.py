"""Legacy status words are normalized on read."""

from __future__ import annotations

import pytest

from models.status import RunStatus, normalize_run_status


@pytest.mark.parametrize(
    ("word", "status", "warned"),
    [
        ("success", RunStatus.COMPLETED, False),
        ("error", RunStatus.FAILED, False),
        ("stopped", RunStatus.CANCELED, False),
        ("cancelled", RunStatus.CANCELED, False),
        ("completed_with_persistence_error", RunStatus.COMPLETED, True),
        ("interrupted", RunStatus.INTERRUPTED, False),
        ("waiting", RunStatus.WAITING, False),
    ],
)
def test_normalize_run_status__maps_legacy_words(word: str, status: RunStatus, warned: bool) -> None:
    got, warning = normalize_run_status(word)
    assert got is status
    assert (warning is not None) is warned


def test_normalize_run_status__refuses_an_unknown_word() -> None:
    with pytest.raises(ValueError, match="unknown run status"):
        normalize_run_status("finished-ish")
