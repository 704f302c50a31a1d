"""Who may do what: every route of the app has a row in tests/api/authz_table.py, and docs/api.md shows the
table the app gives (the status each kind of caller gets from each route). After a change of the rules,
``PARKWAY_WRITE_AUTHZ_TABLE=1 python -m pytest tests/api/test_authz_table.py`` rewrites the table."""

from __future__ import annotations

from tests.api.authz_table import ROWS, routes


def test_every_route_of_the_app__has_a_row() -> None:
    from api.app import app

    served = routes(app)
    missing = [f"route {route} has no row in tests/api/authz_table.py ROWS" for route in served if route not in ROWS]
    stale = [f"row {row} names no route of the app" for row in ROWS if row not in served]
    assert not missing + stale, "\n".join(missing + stale)
