"""Exactly the planned offset ranges, read with Spark's own Kafka source (``assign`` + per-partition
``startingOffsets``/``endingOffsets``, ``failOnDataLoss``), with the Kafka metadata as ``kafka_*``
columns. The connection's options come from the job spec (non-secret) and the secrets file."""

from __future__ import annotations

import json
import math

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from offsetbatch.errors import ConfigError
from offsetbatch.jobspec import JobSpec
from offsetbatch.source.connection import SECRETS_ARG

KAFKA_TIMEOUT_MS = 20_000

# The columns Spark's Kafka source returns (docs: Structured Streaming + Kafka integration guide).
KAFKA_SOURCE_DDL = ("`key` BINARY, `value` BINARY, `topic` STRING, `partition` INT, `offset` BIGINT, "
                    "`timestamp` TIMESTAMP, `timestampType` INT, `headers` ARRAY<STRUCT<`key`: STRING, `value`: BINARY>>")


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
            f"{options['kafka.security.protocol']} but the job got no credentials ({SECRETS_ARG} FILE, which the "
            f"spark_job task passes). Run the batch through its DAG, not spark-submit by hand without the file.")
    return options


def read_ranges(spark: SparkSession, spec: JobSpec, secrets: dict[str, str] | None = None) -> DataFrame:
    """Exactly the planned ranges, at least one Spark task per Kafka partition and more for big ones."""
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
        .options(**kafka_client_options(spec, secrets or {}))
        .option("kafka.bootstrap.servers", spec.bootstrap)
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "true")
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


def with_metadata(raw: DataFrame) -> DataFrame:
    return raw.select(
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("key").alias("kafka_key"),
        F.col("headers").alias("kafka_headers"),
        F.col("value"),
    )
