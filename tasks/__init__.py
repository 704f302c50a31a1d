"""The Celery app, the worker tasks, the workflow SDK and publish-after-commit."""
