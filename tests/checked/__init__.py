"""Workflow modules for ``parkway check`` and a worker's start check (tests/cli/test_check.py): imported
only by the subprocesses those tests run (``PARKWAY_IMPORTS``), never by the test process."""
