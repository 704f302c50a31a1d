"""The four cases, each measured beside its baseline in the same run: one module per case, the helpers they
share in ``common`` (and the API subprocess in ``httpapi``). What ``bench.run`` and ``bench.broker_down`` use
is here.

Importing this imports the Celery app, which reads the settings at import: ``bench.run`` imports it only
after it has pointed the environment at the bench's database and broker.
"""

from bench.cases.anatomy import case_anatomy
from bench.cases.common import Bench, Producers, loadavg, park_many
from bench.cases.latency import case_latency
from bench.cases.memory import case_memory
from bench.cases.recovery import case_recovery
from bench.cases.sweep import case_sweep
from bench.cases.throughput import case_throughput

__all__ = [
    "Bench",
    "Producers",
    "case_anatomy",
    "case_latency",
    "case_memory",
    "case_recovery",
    "case_sweep",
    "case_throughput",
    "loadavg",
    "park_many",
]
