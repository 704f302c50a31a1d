"""The HTTP API (``api.app:app``): runs, interactions, principals, grants, events, health and metrics."""
