"""The TypeScript client's API types are the OpenAPI's: clients/typescript/src/api-types.ts is generated from
``app.openapi()`` (clients/typescript/scripts/openapi_types.py) and must not drift from it."""

from __future__ import annotations

import runpy

from tests.support import ROOT

GENERATOR = ROOT / "clients" / "typescript" / "scripts" / "openapi_types.py"


def test_typescript_api_types__match_the_openapi() -> None:
    generator = runpy.run_path(str(GENERATOR))
    committed = generator["OUT"].read_text()
    assert committed == generator["current"](), (
        "clients/typescript/src/api-types.ts differs from the OpenAPI: run "
        ".venv/bin/python clients/typescript/scripts/openapi_types.py"
    )


def test_typescript_api_types__every_component_is_a_type() -> None:
    from api.app import app

    committed = (ROOT / "clients" / "typescript" / "src" / "api-types.ts").read_text()
    for name in app.openapi()["components"]["schemas"]:
        if name.startswith("workflow."):  # a server's own workflows (api/payloads.py), not the API's types
            continue
        assert f"export type {name.replace('-', '')} = " in committed, name
