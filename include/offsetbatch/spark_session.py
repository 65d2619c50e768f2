"""Whether Spark code runs in the driver spark-submit started or as a client of a Spark Connect
server, and what differs between the two: on Spark Connect every question to the session is a round
trip, so settings go in one request and an observation is made without one. On the lowest floor:
the job, the formats and the sinks' job halves all build the batch's plan."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pyspark.sql import Column, DataFrame, Observation, SparkSession


def is_remote_session(spark: "SparkSession") -> bool:
    """A Spark Connect session (the spark_job task runs the job's code itself, see
    ``dag/operators/spark_connect``) rather than the driver spark-submit started. Asks nothing of
    the server."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def observe(frame: "DataFrame", observation: "Observation", *metrics: "Column") -> "DataFrame":
    """``frame.observe(observation, *metrics)`` without analyzing ``frame``. The Spark Connect
    client first asks the server whether ``frame`` is streaming: a round trip in which the server
    analyzes the plan (before the job's one analysis, ``job.transform.analyzed_transform``, which
    names the value schema or the transform when the plan does not analyze; or, for the sink's
    written-rows count, once more after it). The job's frames are batch reads, so on Spark Connect
    the plan's node is made without asking, as the client's own ``Observation._on`` makes it.
    (``pyspark.sql.connect.plan`` and ``Observation._result`` are internal: pinned pyspark 4.3.0,
    covered by the Spark Connect tests, which read the observed statistics and the errors.)"""
    if not is_remote_session(frame.sparkSession):
        return frame.observe(observation, *metrics)
    from pyspark.errors import PySparkAssertionError
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
    from pyspark.sql.connect.plan import CollectMetrics

    if observation._result is not None:  # noqa: SLF001 - what Observation._on checks
        raise PySparkAssertionError(errorClass="REUSE_OBSERVATION", messageParameters={})
    observation._result = {}  # noqa: SLF001 - filled when the action that carries it returns
    return ConnectDataFrame(CollectMetrics(frame._plan, observation, list(metrics)), frame._session)  # noqa: SLF001


def get_settings(spark: "SparkSession", defaults: dict[str, str]) -> dict[str, str | None]:
    """Session settings, each with its default, in one request: on Spark Connect each ``spark.conf``
    call is a round trip (2-7 ms on loopback; a small batch made 13 of them). (The Connect client's
    ``config`` request is internal: pinned pyspark 4.3.0, as ``RuntimeConf`` builds it.)"""
    if not is_remote_session(spark):
        return {key: spark.conf.get(key, default) for key, default in defaults.items()}
    import pyspark.sql.connect.proto as pb

    result = _config(spark, pb.ConfigRequest.Operation(get_with_default=pb.ConfigRequest.GetWithDefault(
        pairs=[pb.KeyValue(key=key, value=default) for key, default in defaults.items()])))
    return {key: value for key, (_, value) in zip(defaults, result.pairs)}


def set_settings(spark: "SparkSession", settings: dict[str, str]) -> None:
    """``spark.conf.set`` of every pair, in one request on Spark Connect (``get_settings``)."""
    if not settings:
        return
    if not is_remote_session(spark):
        for key, value in settings.items():
            spark.conf.set(key, value)
        return
    import pyspark.sql.connect.proto as pb

    _config(spark, pb.ConfigRequest.Operation(set=pb.ConfigRequest.Set(
        pairs=[pb.KeyValue(key=key, value=value) for key, value in settings.items()])))


def unset_settings(spark: "SparkSession", keys: "Iterable[str]") -> None:
    """``spark.conf.unset`` of every key, in one request on Spark Connect (``get_settings``)."""
    keys = list(keys)
    if not is_remote_session(spark):
        for key in keys:
            spark.conf.unset(key)
        return
    import pyspark.sql.connect.proto as pb

    _config(spark, pb.ConfigRequest.Operation(unset=pb.ConfigRequest.Unset(keys=keys)))


def _config(spark: "SparkSession", operation: Any) -> Any:  # noqa: ANN401 - Connect's protobuf types
    import warnings

    result = spark.conf._client.config(operation)  # noqa: SLF001 - what RuntimeConf.set/get/unset call
    for warning in result.warnings:  # as RuntimeConf passes them on (a deprecated key, say)
        warnings.warn(warning, stacklevel=3)
    return result
