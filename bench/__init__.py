"""Benchmarks: the cost of exactly-once, measured against bare Celery in the same run (``make bench``)."""
