"""``normalize_url``: every PostgreSQL URL is opened with psycopg 3, whatever driver it names."""

from __future__ import annotations

import pytest

from parkway.db import normalize_url

REST = "user:pw@db.example:5432/parkway?sslmode=require"


@pytest.mark.parametrize(
    "scheme", ["postgresql", "postgres", "postgresql+psycopg2", "postgresql+asyncpg", "postgresql+pg8000",
               "postgres+asyncpg", "POSTGRESQL+AsyncPG", "postgresql+psycopg"],
)  # fmt: skip
def test_normalize_url__any_postgresql_driver_becomes_psycopg(scheme: str) -> None:
    assert normalize_url(f"{scheme}://{REST}") == f"postgresql+psycopg://{REST}"


def test_normalize_url__keeps_what_follows_the_scheme_as_it_is() -> None:
    url = "postgresql+asyncpg:///parkway?host=/run/postgresql%2Bsocket&options=-c%20a%3D1"
    assert normalize_url(url) == "postgresql+psycopg:///parkway?host=/run/postgresql%2Bsocket&options=-c%20a%3D1"
