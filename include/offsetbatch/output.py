"""The documented read path of a pipeline's table.

Only published batches are under ``<table>/batch_id=N/``; a batch is published after its commit
transaction, so these readers never see output of an uncommitted batch. ``spark.read.parquet(table)``
gives the same rows: these helpers only add the rejected output and a typed entry point.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from offsetbatch.layout import TableLayout


def read_committed(spark: SparkSession, table: str) -> DataFrame:
    """Committed output, with ``batch_id`` (and ``event_date`` if configured) as partition columns."""
    return spark.read.parquet(table)


def read_rejected(spark: SparkSession, table: str) -> DataFrame:
    """Malformed records of committed batches: kafka_topic/partition/offset/timestamp/key, raw_value, error, batch_id."""
    return spark.read.parquet(TableLayout(table).rejected_root())
