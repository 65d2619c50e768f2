"""Exactly the planned offset ranges, read with Spark's own Kafka source (``assign`` + per-partition
``startingOffsets``/``endingOffsets``, ``failOnDataLoss``), with the Kafka metadata as ``kafka_*``
columns. The connection's options come from the job spec (non-secret) and the secrets file."""

from __future__ import annotations

import json
import math

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from offsetbatch import job_secrets
from offsetbatch.errors import ConfigError
from offsetbatch.job import codegen
from offsetbatch.jobspec import JobSpec

KAFKA_TIMEOUT_MS = 20_000
HEADERS_TYPE = "ARRAY<STRUCT<`key`: STRING, `value`: BINARY>>"
# Fetch sizes of the job's consumers (one per Spark task, each reading one partition's range): the
# consumer sends the next fetch only when it has handed out what it buffered, so the task waits one
# broker round trip per fetch. 4 MiB per fetch (Kafka's default: 1 MiB) and 5,000 records per poll
# (default 500): a quarter of the round trips, for about 4 MiB more heap per running task
# (docs/performance.md measures it).
# The poll that hands out a partition's last buffered records has already sent the next fetch; at
# the end of the log the broker holds that fetch for fetch.max.wait.ms (default 500) before
# answering empty, and the offset check Spark makes after every poll (``ListOffsets``, on the same
# connection) queues behind it. A batch ends at the log's end, so every task paid half a second at
# its end. The job reads only offsets that exist (the plan stops at the log's end, its last stable
# offset under read_committed), so nothing is gained by waiting for more: 10 ms.
FETCH_OPTIONS = {
    "kafka.max.partition.fetch.bytes": str(4 << 20),
    "kafka.max.poll.records": "5000",
    "kafka.receive.buffer.bytes": str(1 << 20),
    "kafka.fetch.max.wait.ms": "10",
}


def kafka_client_options(spec: JobSpec, secrets: dict[str, str]) -> dict[str, str]:
    """The connection's ``kafka.*`` options: the spec's (non-secret) and the secrets file's."""
    options = {**spec.kafka_options, **{k: v for k, v in secrets.items() if k.startswith("kafka.")}}
    protocol = options.get("kafka.security.protocol", "PLAINTEXT")
    if "kafka.sasl.jaas.config" in secrets and not protocol.startswith("SASL_"):
        raise ConfigError(
            f"pipeline {spec.pipeline} batch {spec.batch_id}: the job got SASL credentials but its spec says "
            f"{protocol}: the Kafka connection changed after the batch was planned. Clear the run's plan task so "
            f"that it writes the spec again with the connection's current settings.")
    if protocol.startswith("SASL_") and "kafka.sasl.jaas.config" not in options:
        raise ConfigError(
            f"pipeline {spec.pipeline} batch {spec.batch_id}: the Kafka connection uses "
            f"{options['kafka.security.protocol']} but the job got no credentials ({job_secrets.ARG} FILE, which the "
            f"spark_job task passes). Run the batch through its DAG, not spark-submit by hand without the file.")
    return options


def reads_headers(spec: JobSpec) -> bool:
    """Whether the batch's output can contain ``kafka_headers``. Spark's Kafka source builds the
    headers array of every record when asked (its scan prunes no column), so it is asked only when
    the output may hold them: no transform, a Python one, or SQL that names ``kafka_headers`` or
    has a ``*`` (conservative: ``count(*)`` counts as one); and when the value's or the key's format
    needs them (a Confluent schema id in a header)."""
    from offsetbatch.formats import FORMATS

    key = spec.key_view()
    if (FORMATS[spec.value_format].reads_headers(spec) or (key is not None and FORMATS[key.value_format].reads_headers(key))
            or spec.transform_python or not spec.transform_sql):
        return True
    sql = spec.transform_sql.lower()
    return "kafka_headers" in sql or "*" in sql


V1_SOURCES = "spark.sql.sources.useV1SourceList"
V1_SOURCES_DEFAULT = "avro,csv,json,kafka,orc,parquet,text"  # Spark 4.3's default


def read_kafka_with_v2(spark: SparkSession) -> None:
    """Spark reads a Kafka batch through its DataSource V1 relation unless ``kafka`` is taken off
    ``spark.sql.sources.useV1SourceList``. The V1 relation hands each record out as an external
    ``Row`` that Spark converts back into an internal row: two copies of every record, 0.5-0.7 s per
    5,000,000 on 2 cores (docs/performance.md). The V2 reader (the one Structured Streaming uses)
    builds the internal row at once, with the same consumer, options and offset checks. The other
    sources on the list stay as the session has them."""
    current = spark.conf.get(V1_SOURCES, V1_SOURCES_DEFAULT) or ""
    kept = [name for name in current.split(",") if name.strip() and name.strip().lower() != "kafka"]
    if len(kept) != len([n for n in current.split(",") if n.strip()]):
        spark.conf.set(V1_SOURCES, ",".join(kept))


def read_ranges(spark: SparkSession, spec: JobSpec, secrets: dict[str, str] | None = None) -> DataFrame:
    """Exactly the planned ranges, at least one Spark task per Kafka partition and more for big ones,
    read with the Kafka source's DataSource V2 reader (``read_kafka_with_v2``)."""
    read_kafka_with_v2(spark)
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in spec.offset_ranges:
        assign.setdefault(r.topic, []).append(r.partition)
        starting.setdefault(r.topic, {})[str(r.partition)] = r.from_offset
        ending.setdefault(r.topic, {})[str(r.partition)] = r.until_offset
    total = sum(r.size for r in spec.offset_ranges)
    min_partitions = max(len(spec.ranges), math.ceil(total / spec.records_per_task))
    return (
        spark.read.format("kafka")
        .options(**FETCH_OPTIONS)
        .options(**kafka_client_options(spec, secrets or {}))
        .option("kafka.bootstrap.servers", spec.bootstrap)
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("failOnDataLoss", "true")
        .option("includeHeaders", str(reads_headers(spec)).lower())
        .option("kafka.isolation.level", spec.isolation_level)
        .option("minPartitions", str(min_partitions))
        # Bounded waits: a lost broker fails the job in well under a minute instead of minutes of
        # retries (a partition leader moving to another live broker is still retried within them).
        .option("kafka.request.timeout.ms", str(KAFKA_TIMEOUT_MS))
        .option("kafka.default.api.timeout.ms", str(KAFKA_TIMEOUT_MS))
        .option("kafkaConsumer.pollTimeoutMs", str(KAFKA_TIMEOUT_MS))
        .option("fetchOffset.numRetries", "2")
        .load()
    )


# A small batch (up to job.codegen.SMALL_BATCH_RECORDS records) is written by at most this many Spark
# tasks, each reading its share of the planned partitions one after another. A task's fixed costs
# (its deserialization, a Parquet file per event date with its create and commit) are most of a
# small batch's time, and two tasks still keep two cores busy. Measured on a warm Connect server,
# 10,000 records in 4 partitions, interleaved (docs/performance.md): 2 tasks / 4 tasks 0.95 (faster
# in 12 of 18 rounds), 1 task / 4 tasks 1.08.
SMALL_BATCH_TASKS = 2


def in_few_tasks(records: DataFrame, spec: JobSpec) -> DataFrame:
    """``records`` (``read_ranges``) read by at most ``SMALL_BATCH_TASKS`` tasks when the batch is
    small; a large batch keeps a task per partition and more (``records_per_task``). The same
    records either way: Spark's ``coalesce`` hands a task whole splits of the ranges, no shuffle."""
    small = sum(r.size for r in spec.offset_ranges) <= codegen.SMALL_BATCH_RECORDS
    return records.coalesce(SMALL_BATCH_TASKS) if small else records  # fewer partitions: left as they are


def with_metadata(raw: DataFrame, spec: JobSpec) -> DataFrame:
    """The Kafka source's columns as the records' ``kafka_*`` columns; ``kafka_headers`` is NULL
    when the read left the headers out (``reads_headers``), so every batch has the same columns.
    (Decided from the spec, not by asking the frame its columns: on Spark Connect that is a round
    trip in which the server analyzes the plan.)"""
    headers = F.col("headers") if reads_headers(spec) else F.lit(None).cast(HEADERS_TYPE)
    return raw.select(
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("key").alias("kafka_key"),
        headers.alias("kafka_headers"),
        F.col("value"),
    )
