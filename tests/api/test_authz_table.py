"""Who may do what: every route of the app has a row in tests/api/authz_table.py, and docs/api.md shows the
table the app gives (the status each kind of caller gets from each route). After a change of the rules,
``PARKWAY_WRITE_AUTHZ_TABLE=1 python -m pytest tests/api/test_authz_table.py`` rewrites the table."""

from __future__ import annotations

import difflib
import os

from fastapi.testclient import TestClient

from tests.api.authz_table import DOCS, ROWS, WRITE, in_docs, render, routes, statuses


def test_every_route_of_the_app__has_a_row() -> None:
    from api.app import app

    served = routes(app)
    missing = [f"route {route} has no row in tests/api/authz_table.py ROWS" for route in served if route not in ROWS]
    stale = [f"row {row} names no route of the app" for row in ROWS if row not in served]
    assert not missing + stale, "\n".join(missing + stale)


def test_docs_show_who_may_do_what__as_the_app_decides(client: TestClient) -> None:
    from api.app import app

    text = DOCS.read_text()
    start, end = in_docs(text)
    made = render(statuses(client, [route for route in routes(app) if route in ROWS]))
    if os.environ.get(WRITE) == "1":
        DOCS.write_text(text[:start] + made + "\n" + text[end:])
        return
    shown = text[start:end].rstrip("\n")
    diff = "\n".join(difflib.unified_diff(shown.splitlines(), made.splitlines(), "docs/api.md", "the app", lineterm=""))
    assert shown == made, f"docs/api.md shows another table than the app gives ({WRITE}=1 rewrites it):\n{diff}"
