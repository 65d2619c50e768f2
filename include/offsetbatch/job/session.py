"""Whether the job runs in the driver spark-submit started or as a client of a Spark Connect server."""

from __future__ import annotations

from pyspark.sql import SparkSession


def is_remote_session(spark: SparkSession) -> bool:
    """A Spark Connect session (the spark_job task runs the job's code itself, see
    ``dag/operators/spark_connect``) rather than the driver spark-submit started."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
