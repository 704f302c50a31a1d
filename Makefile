# The documented commands. Each installs what it needs on first use (a virtualenv from pyproject.toml).
VENV ?= .venv
PY := $(VENV)/bin/python
# Two stamps: `make run` needs the package alone, the other commands its development extras too (tests, lint).
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# The suite in six processes, a module's tests together (they share its workers): much of a test is
# waiting on real processes, so six still fit the 2-core machine (four left it half idle); TEST_PARALLEL= runs
# it in one process. Modules go out in collection order, the longest first (LONG_MODULES in tests/conftest.py,
# the order the suite's own "longest modules" summary prints), not by test count.
TEST_PARALLEL ?= -n 6 --dist loadfile --no-loadscope-reorder

.PHONY: run test test-postgres lint migrate sweep bench demo clean ts-pack

$(RUN_STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $(RUN_STAMP)

# The TypeScript client (clients/typescript): its dev dependencies from the committed lock file (npm ci, again
# when the lock file changes), then the package (dist/esm, dist/cjs) and its tests compiled (again when a source
# changes), then the package's npm tarball packed from that build (ts-pack).
# tests/acceptance/test_typescript_client.py runs the compiled tests against a real stack;
# tests/acceptance/test_typescript_package.py installs the tarball outside the checkout; tests/cli/test_walkthrough.py
# runs the client README's install and agent as printed (tests/docs/reading.py).
TS := clients/typescript
TS_DEPS := $(TS)/node_modules/.package-lock.json
TS_BUILT := $(TS)/.built
TS_SOURCES := $(wildcard $(TS)/src/*.ts $(TS)/test/*.ts $(TS)/examples/*.ts $(TS)/scripts/*.mjs $(TS)/tsconfig*.json) $(TS)/package.json
TS_VERSION := $(shell sed -n 's/^  "version": "\(.*\)",$$/\1/p' $(TS)/package.json)
TS_TARBALL := $(TS)/parkway-client-$(TS_VERSION).tgz

# The development extras on top of the package (so it also satisfies `make run`).
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP) $(RUN_STAMP)

$(TS_DEPS): $(TS)/package-lock.json
	cd $(TS) && npm ci --no-audit --no-fund --loglevel=error

$(TS_BUILT): $(TS_DEPS) $(TS_SOURCES)
	cd $(TS) && npm run --silent build:test
	touch $(TS_BUILT)

# The build above is packed as it is (--ignore-scripts skips prepack's second build of dist/, which would
# remove it under the node tests running from it); `npm pack` run by hand builds first.
$(TS_TARBALL): $(TS_BUILT) $(TS)/README.md
	cd $(TS) && npm pack --ignore-scripts --silent >/dev/null

## ts-pack: the TypeScript client as an npm tarball, clients/typescript/parkway-client-<version>.tgz (its README
## says how to install it)
ts-pack: $(TS_TARBALL)

## run: the whole stack on this machine (embedded PostgreSQL + embedded Valkey broker unless configured); the
## package alone is installed, not the development extras
run: $(RUN_STAMP)
	$(VENV)/bin/parkway up

## test: the whole suite once, on PostgreSQL + Redis. PostgreSQL: PARKWAY_TEST_PG_URL, or 127.0.0.1:5432, or
## the embedded one (tests/conftest.py)
# (PYTHONDONTWRITEBYTECODE, which this project's image sets, is cleared for the run: pytest's first process
# then writes its plugins' assertion-rewritten bytecode, which the six that follow read instead of rewriting it)
test: $(STAMP) $(TS_BUILT) $(TS_TARBALL)
	PYTHONDONTWRITEBYTECODE= PARKWAY_TEST_BROKER=redis $(PY) -m pytest $(TEST_PARALLEL) $(PYTEST_ARGS)

## test-postgres: the same (kept for scripts that call it)
test-postgres: test

## lint: ruff (lint + format check) and mypy strict on the packages
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

## migrate: bring the configured database to the current schema
migrate: $(RUN_STAMP)
	$(VENV)/bin/parkway migrate

sweep: $(RUN_STAMP)
	$(VENV)/bin/parkway sweep --once

## demo: the restart story with real processes, on the embedded defaults in a temporary home (< 1 minute)
demo: $(RUN_STAMP)
	$(VENV)/bin/parkway demo

## bench: the benchmark suite against local PostgreSQL + Redis (never part of `make test`); BENCH_ARGS=--quick
bench: $(STAMP)
	$(PY) -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache $(TS)/node_modules $(TS)/dist $(TS)/build-test $(TS_BUILT) $(TS)/*.tgz
