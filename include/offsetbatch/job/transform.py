"""The pipeline's transform (SQL over the view ``records``, or a Python function), and the
analysis of the batch's plan (value schema, then transform) before any Kafka read."""

from __future__ import annotations

import importlib
import logging
import time

from pyspark.sql import DataFrame, SparkSession

from offsetbatch.errors import TransformAnalysisError
from offsetbatch.formats import FORMATS
from offsetbatch.job import reads
from offsetbatch.jobspec import JobSpec
from offsetbatch.spark_session import is_remote_session, set_settings

log = logging.getLogger(__name__)


def transform(spark: SparkSession, good: DataFrame, spec: JobSpec) -> DataFrame:
    if spec.transform_python:
        module, _, func = spec.transform_python.rpartition(".")
        return getattr(importlib.import_module(module), func)(good)
    if not spec.transform_sql:
        return good
    # ${env:NAME} would copy the job's environment into the output (issue 41, case 8); fmt.`path`, in
    # any spelling of the source, a host's file (issue 58). Set here, after the pipeline's spark.conf.
    allowed = "true" if spec.transform_system_access else "false"
    set_settings(spark, {"spark.sql.variable.substitute": allowed, "spark.sql.runSQLOnFiles": allowed})
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


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0].rstrip(';') if text else ''}"


ONLY_RECORDS = ("a transform reads only the view 'records' and the query's own values (VALUES, range()): no "
                "catalog table, no other session's view, no path read as a table (fmt.`path`, in any spelling)")
FIX = ("Nothing was read from Kafka. Fix {field} in the pipeline's config: the batch stays planned and the next run "
       "executes it unchanged.")


def parse_keys(records: DataFrame, key: JobSpec) -> DataFrame:
    """``records`` with their keys parsed by ``key.format`` (``key``: ``JobSpec.key_view``) into the
    struct column ``KEY_COLUMN`` (NULL for a null key) and the key's reason to reject in
    ``_key_error``. The key format's parse runs on the key in the value's place."""
    from pyspark.sql import functions as F

    from offsetbatch.formats import ERROR, KEY_COLUMN, META

    swapped = records.withColumnRenamed("value", "_value").withColumn("value", F.col("kafka_key"))
    keyed = FORMATS[key.value_format].parse(swapped, key)
    fields = [c for c in keyed.columns if c not in (*META, "value", ERROR, "_value")]
    has_key = F.col("kafka_key").isNotNull()
    return keyed.select(*META, F.col("_value").alias("value"),
                        F.when(has_key, F.struct(*fields)).alias(KEY_COLUMN),
                        F.when(has_key, F.col(ERROR)).alias("_key_error"))


def parse_records(records: DataFrame, spec: JobSpec) -> DataFrame:
    """``records`` parsed with the pipeline's value format (and key format). A ``value.schema`` Spark
    cannot read fails when the plan is analyzed, before any Kafka read (Spark reads Kafka only when
    an action runs): here in classic PySpark, which analyzes every step; on Spark Connect when
    ``analyzed_transform`` analyzes the whole plan, which then names the schema (``schema_failure``).
    A record whose value is good but whose key is not is rejected, ``key: <reason>``."""
    from pyspark.sql import functions as F

    from offsetbatch.formats import ERROR, FATAL, TOMBSTONE

    try:
        key = spec.key_view()
        if key is not None:
            records = parse_keys(records, key)
        tombstones = getattr(spec, "tombstones", "reject") == "delete"
        if tombstones:
            records = records.withColumn(TOMBSTONE, F.col("value").isNull())
        parsed = FORMATS[spec.value_format].parse(records, spec)
        if tombstones:  # the format's "null value" is not a reason then; a tombstone deletes its key, if it has one
            parsed = parsed.withColumn(ERROR, F.when(F.col(TOMBSTONE) & F.col("kafka_key").isNull(),
                                                     F.lit("tombstone without a key: it deletes nothing"))
                                       .when(F.col(TOMBSTONE), F.lit(None).cast("string"))
                                       .otherwise(F.col(ERROR)))
        if key is not None:
            key_error = F.col("_key_error")
            error = F.coalesce(F.col(ERROR), F.when(key_error.startswith(FATAL),  # stays fatal
                                                    F.concat(F.lit(f"{FATAL}key: "), F.substring(key_error, len(FATAL) + 1, 1 << 20)))
                               .otherwise(F.concat(F.lit("key: "), key_error)))
            parsed = parsed.withColumn(ERROR, error).drop("_key_error")
        return parsed
    except Exception as exc:  # noqa: BLE001 - whatever Spark says about the schema, the user needs it
        raise _schema_error(spec, exc) from exc


def _schema_error(spec: JobSpec, exc: Exception) -> TransformAnalysisError:
    return TransformAnalysisError(
        f"pipeline {spec.pipeline} batch {spec.batch_id}: value.schema {spec.schema_ddl!r} is not a Spark "
        f"schema: {_first_line(exc)}. {FIX.format(field='value.schema')}")


def schema_failure(records: DataFrame, spec: JobSpec) -> TransformAnalysisError | None:
    """Why ``records`` (the parsed records, before the transform) do not analyze, as the value
    schema's error; ``None`` if they do. Asked only once the whole plan failed analysis: on Spark
    Connect nothing is analyzed before that, each analysis being a round trip (docs/performance.md)."""
    try:
        records.schema  # noqa: B018 - forces analysis
    except Exception as exc:  # noqa: BLE001 - whatever Spark says about the schema, the user needs it
        return _schema_error(spec, exc)
    return None


def analyzed_transform(spark: SparkSession, good: DataFrame, spec: JobSpec) -> DataFrame:
    """The transform over the batch's good records, analyzed at once: a wrong column or function
    name (which config validation cannot see) fails in seconds, before Kafka is read, naming the
    pipeline, the batch and the transform (or the value schema, when the records themselves do not
    analyze). It is the batch's own plan that is analyzed (Spark reads Kafka only when the write
    runs), so no second plan is built for the check: on Spark Connect the server keeps the analyzed
    plan of a frame whose schema it was asked, and the reads check and the write build on it. A SQL
    transform's analyzed plan must then read only the records (``job.reads``), unless
    transform.allow_system_access. Nothing before this asks Spark about the plan: on Spark Connect
    each question is a round trip (docs/performance.md, *A small batch on Spark Connect*)."""
    if spec.transform_python:
        field, what = "transform.python", f"transform.python {spec.transform_python!r}"
    else:
        field, what = "transform.sql", f"transform.sql {' '.join((spec.transform_sql or '').split())!r}"
    checks_reads = bool(spec.transform_sql) and not spec.transform_system_access
    started = time.monotonic()
    try:
        out = transform(spark, good, spec)
        if not isinstance(out, DataFrame):
            raise TypeError(f"the transform returned {type(out).__name__}, not a DataFrame")
        out.schema  # noqa: B018 - forces analysis of the whole plan
        if checks_reads:
            outside = reads.check(spark, out)
    except Exception as exc:  # noqa: BLE001 - whatever Spark says about the transform, the user needs it
        failure = schema_failure(good, spec)
        if failure is not None:
            raise failure from exc
        hint = (f" ({ONLY_RECORDS})" if checks_reads and "TABLE_OR_VIEW_NOT_FOUND" in str(exc) else "")
        raise TransformAnalysisError(
            f"pipeline {spec.pipeline} batch {spec.batch_id}: the {what} fails analysis against the records' "
            f"columns ({', '.join(good.columns)}): {_first_line(exc)}{hint}. {FIX.format(field=field)}") from exc
    if checks_reads:
        if outside is not None:
            raise TransformAnalysisError(
                f"pipeline {spec.pipeline} batch {spec.batch_id}: the {what} reads more than the records: "
                f"{outside}. {ONLY_RECORDS}; remove the rest, or set transform.allow_system_access: true if "
                f"this pipeline's SQL is trusted. {FIX.format(field=field)}")
        log.info("pipeline %s batch %d: the %s analyzes and reads only the records (checked in %.0f ms)",
                 spec.pipeline, spec.batch_id, what, (time.monotonic() - started) * 1000)
    elif spec.transform_sql or spec.transform_python:
        log.info("pipeline %s batch %d: the %s analyzes: %d output column(s)", spec.pipeline, spec.batch_id, what,
                 len(out.columns))
    return out
