# The documented commands. Each installs what it needs on first use (a virtualenv from pyproject.toml).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run test test-postgres test-sqlite lint migrate sweep bench demo clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## run: the whole stack on this machine (embedded SQLite + filesystem broker unless configured)
run: $(STAMP)
	$(VENV)/bin/parkway up

## test: the whole suite twice: PostgreSQL + Redis, then SQLite + the embedded broker
test: $(STAMP)
	$(MAKE) --no-print-directory test-postgres
	$(MAKE) --no-print-directory test-sqlite

test-postgres: $(STAMP)
	PARKWAY_TEST_BACKEND=postgres $(PY) -m pytest $(PYTEST_ARGS)

test-sqlite: $(STAMP)
	PARKWAY_TEST_BACKEND=sqlite $(PY) -m pytest $(PYTEST_ARGS)

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
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
