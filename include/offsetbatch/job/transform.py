"""The pipeline's transform (SQL over the view ``records``, or a Python function), and its analysis
against an empty frame of the records' real columns before any Kafka read."""

from __future__ import annotations

import importlib
import logging

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from offsetbatch.errors import TransformAnalysisError
from offsetbatch.formats import ERROR, FORMATS
from offsetbatch.job.read import KAFKA_SOURCE_DDL, with_metadata
from offsetbatch.job.session import is_remote_session
from offsetbatch.jobspec import JobSpec

log = logging.getLogger(__name__)


def transform(spark: SparkSession, good: DataFrame, spec: JobSpec) -> DataFrame:
    if spec.transform_python:
        module, _, func = spec.transform_python.rpartition(".")
        return getattr(importlib.import_module(module), func)(good)
    if not spec.transform_sql:
        return good
    if is_remote_session(spark):
        return _connect_sql(spark, spec.transform_sql, good)
    good.createOrReplaceTempView("records")
    return spark.sql(spec.transform_sql)


def _connect_sql(spark: SparkSession, sql: str, records: DataFrame) -> DataFrame:
    """On Spark Connect, the SQL transform with ``records`` bound in the same request (what
    ``spark.sql(query, records=df)`` sends): a temporary view would be planned in a request of its
    own, and the server returns observed metrics only for observations planned in the request
    that runs them. (``pyspark.sql.connect.plan`` is internal: pinned pyspark 4.3.0.)"""
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
    from pyspark.sql.connect.plan import SQL, SubqueryAlias

    return ConnectDataFrame(SQL(sql, views=[SubqueryAlias(records._plan, "records")]), spark)


def empty_records(spark: SparkSession, spec: JobSpec) -> DataFrame:
    """The records the transform sees, without rows: an empty frame of the Kafka source's columns
    through the same metadata and format code as real records (META, ``value`` if the format keeps
    it, the fields of ``spec.schema_ddl``), so the analysis sees exactly the real columns."""
    fmt = FORMATS[spec.value_format]
    parsed = fmt.parse(with_metadata(spark.createDataFrame([], KAFKA_SOURCE_DDL)), spec)
    good = parsed.where(F.col(ERROR).isNull()).drop(ERROR)
    return good if fmt.keeps_value else good.drop("value")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0].rstrip(';') if text else ''}"


def analyze_transform(spark: SparkSession, spec: JobSpec) -> None:
    """Run the transform on ``empty_records`` and force Spark's analysis, so a wrong column or
    function name (which config validation cannot see) fails in seconds, before Kafka is read,
    naming the pipeline, the batch and the transform, instead of after reading every range."""
    fix = ("Nothing was read from Kafka. Fix {field} in the pipeline's config: the batch stays planned and the "
           "next run executes it unchanged.")
    try:
        records = empty_records(spark, spec)
    except Exception as exc:  # noqa: BLE001 - whatever Spark says about the schema, the user needs it
        raise TransformAnalysisError(
            f"pipeline {spec.pipeline} batch {spec.batch_id}: value.schema {spec.schema_ddl!r} is not a Spark "
            f"schema: {_first_line(exc)}. {fix.format(field='value.schema')}") from exc
    if spec.transform_python:
        field, what = "transform.python", f"transform.python {spec.transform_python!r}"
    else:
        field, what = "transform.sql", f"transform.sql {' '.join((spec.transform_sql or '').split())!r}"
    try:
        out = transform(spark, records, spec)
        if not isinstance(out, DataFrame):
            raise TypeError(f"the transform returned {type(out).__name__}, not a DataFrame")
        out.schema  # noqa: B018 - forces analysis of the whole plan
    except Exception as exc:  # noqa: BLE001 - whatever Spark says about the transform, the user needs it
        raise TransformAnalysisError(
            f"pipeline {spec.pipeline} batch {spec.batch_id}: the {what} fails analysis against the records' "
            f"columns ({', '.join(records.columns)}): {_first_line(exc)}. {fix.format(field=field)}") from exc
    if spec.transform_sql or spec.transform_python:
        log.info("pipeline %s batch %d: the %s analyzes: %d output column(s)", spec.pipeline, spec.batch_id, what,
                 len(out.columns))
