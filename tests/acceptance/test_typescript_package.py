"""The TypeScript client as someone outside this repository gets it (clients/typescript/README.md, "Install"):
the tarball ``make ts-pack`` packs, installed with ``npm install`` into an empty project outside the checkout,
offline (it has no runtime dependency). Plain Node loads it with ``import`` and with ``require``, and runs the
README's import line compiled by tsc against the installed types. The README's install and agent run as printed
in the walkthrough's terminal, on its stack (tests/cli/test_walkthrough.py, tests/docs/reading.py)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from api.app import app
from tests.docs import snippets
from tests.docs.reading import pack_the_client
from tests.docs.snippets import IN_THE_PACKAGE
from tests.support import ROOT

CLIENT = ROOT / "clients" / "typescript"
PACKAGE = json.loads((CLIENT / "package.json").read_text())

# A CommonJS consumer: tsc checks it against the types of the `require` condition, plain Node runs it.
REQUIRED = """import { Parkway, complete } from "@parkway/client";
const client: Parkway = new Parkway({ url: "http://127.0.0.1:1", token: "unused" });
console.log(typeof client.getRun, complete({ ok: true }).type);
"""
# The README's tsc line (clients/typescript/README.md, "The example"); @types/node is the checkout's, whose
# own declarations are not this test's to check.
TSC = [str(CLIENT / "node_modules" / ".bin" / "tsc"), "--module", "nodenext", "--target", "es2022", "--types", "node",
       "--typeRoots", str(CLIENT / "node_modules" / "@types"), "--strict", "--skipLibCheck"]  # fmt: skip


def run(args: list[str], cwd: Path, timeout: float = 120) -> str:
    """``args`` run in ``cwd``; their stdout, or the assertion error with both outputs."""
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty npm project outside the checkout, the tarball installed in it."""
    pack_the_client()
    tarball = CLIENT / f"parkway-client-{PACKAGE['version']}.tgz"
    project = tmp_path_factory.mktemp("ts-project").resolve()
    assert not project.is_relative_to(ROOT)
    run(["npm", "install", "--offline", "--no-audit", "--no-fund", "--cache", str(project / ".npm"), str(tarball)],
        project)  # fmt: skip
    return project


def test_typescript_package__its_version_is_the_apis() -> None:
    assert PACKAGE["version"] == app.version  # the API's version: its OpenAPI's info.version
    readme = (CLIENT / "README.md").read_text()
    assert f"parkway-client-{app.version}.tgz" in readme, "clients/typescript/README.md installs another version"


def test_typescript_package__installed_from_its_tarball__plain_node_imports_and_requires_it(project: Path) -> None:
    names = "Object.keys(client).sort().join()"
    imported = run(["node", "--input-type=module", "-e", f'const client = await import("@parkway/client"); '
                    f'console.log(import.meta.resolve("@parkway/client")); console.log({names})'], project)  # fmt: skip
    required = run(["node", "-e", f'const client = require("@parkway/client"); '
                    f'console.log(require.resolve("@parkway/client")); console.log({names})'], project)  # fmt: skip

    esm, esm_names = imported.split()
    cjs, cjs_names = required.split()
    assert esm.endswith("/node_modules/@parkway/client/dist/esm/index.js"), imported
    assert cjs.endswith("/node_modules/@parkway/client/dist/cjs/index.js"), required
    assert esm_names == cjs_names and {"Parkway", "worker", "pushHandler"} <= set(esm_names.split(",")), (
        imported + required
    )
    # Nothing but the package itself was installed: it has no runtime dependency.
    assert "dependencies" not in PACKAGE
    assert sorted(p.name for p in (project / "node_modules").iterdir()) == [".package-lock.json", "@parkway"]


def test_typescript_package__a_commonjs_consumer_and_the_readmes_import_line__compile_and_run(project: Path) -> None:
    # Given: a CommonJS consumer, and the README's import line using each name it imports (an ES module)
    [block] = [b for b in snippets.blocks("clients/typescript/README.md") if b.detail == IN_THE_PACKAGE]
    imported = re.fullmatch(r"import \{ (.+) \} from \"@parkway/client\";\n", block.text)
    assert imported is not None, block.text
    names = imported.group(1).split(", ")
    (project / "required.cts").write_text(REQUIRED)
    (project / "names.mts").write_text(f"{block.text}console.log([{', '.join(names)}].map((f) => typeof f).join());\n")

    # When: tsc checks both against the installed types (one run), plain Node runs each
    run([*TSC, "required.cts", "names.mts"], project)

    assert run(["node", "required.cjs"], project).split() == ["function", "complete"]
    assert run(["node", "names.mjs"], project).strip() == ",".join(["function"] * len(names))
