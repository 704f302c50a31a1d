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

## test: the whole suite twice, side by side: PostgreSQL + Redis here, SQLite + the embedded broker in the
## background (its log in var/test-sqlite.log, shown at the end); fails if either run fails
test: $(STAMP)
	@mkdir -p var
	@echo "make test: the SQLite run goes on in the background (var/test-sqlite.log); the PostgreSQL run follows here"
	@PARKWAY_TEST_BACKEND=sqlite $(PY) -m pytest $(PYTEST_ARGS) > var/test-sqlite.log 2>&1 & sqlite=$$!; \
	PARKWAY_TEST_BACKEND=postgres $(PY) -m pytest $(PYTEST_ARGS); postgres=$$?; \
	wait $$sqlite; sqlite_rc=$$?; \
	echo "make test: the SQLite run (var/test-sqlite.log):"; \
	if [ $$sqlite_rc -eq 0 ]; then tail -n 1 var/test-sqlite.log; else cat var/test-sqlite.log; fi; \
	echo "make test: PostgreSQL rc=$$postgres, SQLite rc=$$sqlite_rc"; \
	[ $$postgres -eq 0 ] && [ $$sqlite_rc -eq 0 ]

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
