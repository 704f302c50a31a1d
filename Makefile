# The documented commands. Each installs what it needs on first use (a virtualenv from pyproject.toml).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# The Redis run in three processes, a module's tests together (they share its workers): most of a test is
# waiting on real processes, so this fits the 2-core machine; TEST_PARALLEL= runs it in one process.
# Modules go out in collection order, the longest first (LONG_MODULES in tests/conftest.py), not by test count.
TEST_PARALLEL ?= -n 3 --dist loadfile --no-loadscope-reorder
# The filesystem-broker run beside it in two processes; FS_PARALLEL= runs it in one.
FS_PARALLEL ?= -n 2 --dist loadfile --no-loadscope-reorder

.PHONY: run test test-postgres lint migrate sweep bench demo clean

# The TypeScript client (clients/typescript): its dev dependencies from the committed lock file (npm ci, again
# when the lock file changes), then the package and its tests compiled (again when a source changes).
# tests/acceptance/test_typescript_client.py runs the compiled tests against a real stack.
TS := clients/typescript
TS_DEPS := $(TS)/node_modules/.package-lock.json
TS_BUILT := $(TS)/.built
TS_SOURCES := $(wildcard $(TS)/src/*.ts $(TS)/test/*.ts $(TS)/examples/*.ts) $(TS)/tsconfig.json $(TS)/tsconfig.test.json $(TS)/package.json

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(TS_DEPS): $(TS)/package-lock.json
	cd $(TS) && npm ci --no-audit --no-fund --loglevel=error

$(TS_BUILT): $(TS_DEPS) $(TS_SOURCES)
	cd $(TS) && npm run --silent build:test
	touch $(TS_BUILT)

## run: the whole stack on this machine (embedded PostgreSQL + filesystem broker unless configured)
run: $(STAMP)
	$(VENV)/bin/parkway up

## test: the whole suite once on PostgreSQL + Redis and, side by side, the modules where the broker matters
## (-m broker) on the filesystem broker (its log in var/test-filesystem.log, shown at the end); fails if
## either fails. PostgreSQL: PARKWAY_TEST_PG_URL, or 127.0.0.1:5432, or the embedded one (tests/conftest.py)
test: $(STAMP) $(TS_BUILT)
	@mkdir -p var
	@echo "make test: the filesystem-broker run (-m broker) goes on in the background (var/test-filesystem.log)"
	@PARKWAY_TEST_BROKER=filesystem $(PY) -m pytest -m broker $(FS_PARALLEL) $(PYTEST_ARGS) > var/test-filesystem.log 2>&1 & fs=$$!; \
	PARKWAY_TEST_BROKER=redis $(PY) -m pytest $(TEST_PARALLEL) $(PYTEST_ARGS); redis=$$?; \
	wait $$fs; fs_rc=$$?; \
	echo "make test: the filesystem-broker run (var/test-filesystem.log):"; \
	if [ $$fs_rc -eq 0 ]; then tail -n 1 var/test-filesystem.log; else cat var/test-filesystem.log; fi; \
	echo "make test: Redis rc=$$redis, filesystem broker rc=$$fs_rc"; \
	[ $$redis -eq 0 ] && [ $$fs_rc -eq 0 ]

## test-postgres: the whole suite once, on Redis only
test-postgres: $(STAMP) $(TS_BUILT)
	PARKWAY_TEST_BROKER=redis $(PY) -m pytest $(TEST_PARALLEL) $(PYTEST_ARGS)

## lint: ruff (lint + format check) and mypy strict on the packages
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

## migrate: bring the configured database to the current schema
migrate: $(STAMP)
	$(VENV)/bin/parkway migrate

sweep: $(STAMP)
	$(VENV)/bin/parkway sweep --once

## demo: the restart story with real processes, on the embedded defaults in a temporary home (< 1 minute)
demo: $(STAMP)
	$(VENV)/bin/parkway demo

## bench: the benchmark suite against local PostgreSQL + Redis (never part of `make test`); BENCH_ARGS=--quick
bench: $(STAMP)
	$(PY) -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache $(TS)/node_modules $(TS)/dist $(TS)/build-test $(TS_BUILT)
