"""Whether the job runs in the driver spark-submit started or as a client of a Spark Connect server,
and what differs between the two."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation, SparkSession


def is_remote_session(spark: "SparkSession") -> bool:
    """A Spark Connect session (the spark_job task runs the job's code itself, see
    ``dag/operators/spark_connect``) rather than the driver spark-submit started."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def observe(frame: "DataFrame", observation: "Observation", *metrics: "Column") -> "DataFrame":
    """``frame.observe(observation, *metrics)`` without analyzing ``frame``. The Spark Connect
    client first asks the server whether ``frame`` is streaming: a round trip in which the server
    analyzes the plan, before the job's one analysis (``job.transform.analyzed_transform``), which
    names the value schema or the transform when the plan does not analyze. The job's frames are
    batch reads, so on Spark Connect the plan's node is made without asking, as the client's own
    ``Observation._on`` makes it. (``pyspark.sql.connect.plan`` and ``Observation._result`` are
    internal: pinned pyspark 4.3.0, covered by the Spark Connect tests, which read the observed
    statistics and the errors.)"""
    if not is_remote_session(frame.sparkSession):
        return frame.observe(observation, *metrics)
    from pyspark.errors import PySparkAssertionError
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
    from pyspark.sql.connect.plan import CollectMetrics

    if observation._result is not None:  # noqa: SLF001 - what Observation._on checks
        raise PySparkAssertionError(errorClass="REUSE_OBSERVATION", messageParameters={})
    observation._result = {}  # noqa: SLF001 - filled when the action that carries it returns
    return ConnectDataFrame(CollectMetrics(frame._plan, observation, list(metrics)), frame._session)  # noqa: SLF001
