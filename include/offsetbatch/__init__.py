"""offsetbatch: exactly-once Kafka micro-batches, planned in an offsets ledger, run by Airflow and Spark.

A custom DAG file builds one pipeline's DAG with ``from offsetbatch import pipeline_dag`` (and its
maintenance DAG with ``maintenance_dag``; ``offsetbatch.dag.factory``); importing the package
itself loads nothing else.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["maintenance_dag", "pipeline_dag", "pipeline_dags"]


def __getattr__(name: str) -> Any:
    if name in __all__:  # lazily: the DAG factory pulls in the config models and sinks
        from offsetbatch.dag import factory

        return getattr(factory, name)
    raise AttributeError(f"module 'offsetbatch' has no attribute {name!r}")
