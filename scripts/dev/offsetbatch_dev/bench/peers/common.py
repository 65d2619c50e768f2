"""Arguments and the parse the peers share: one ``from_json`` of the value cast to string (the Avro
peer: ``from_avro`` of the value after its 5-byte Confluent prefix), rows whose required fields are
not null, the output columns and the date partition column. Imports only pyspark (the peers are
submitted by path, with this folder on their Python path)."""

from __future__ import annotations

import argparse
import json

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def arguments(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--starting", required=True, help='startingOffsets JSON: {"topic": {"0": 0, ...}}')
    p.add_argument("--ending", help="endingOffsets JSON (batch peer)")
    p.add_argument("--schema", required=True, help="the value's Spark DDL schema (the Avro peer: its Avro schema JSON)")
    p.add_argument("--required", default="", help="comma-separated fields that must not be null")
    p.add_argument("--columns", required=True, help="comma-separated output columns (fields, partition, offset)")
    p.add_argument("--date-of", required=True, help="timestamp column whose date partitions the output")
    p.add_argument("--out", required=True)
    p.add_argument("--checkpoint", help="checkpoint location (streaming peer)")
    args = p.parse_args()
    json.loads(args.starting)
    return args


def parse(kafka: DataFrame, args: argparse.Namespace) -> DataFrame:
    return _rows(kafka, F.from_json(F.col("value").cast("string"), args.schema), args)


def parse_avro(kafka: DataFrame, args: argparse.Namespace) -> DataFrame:
    """Confluent-framed Avro: skip the magic byte and the 4-byte schema id (every record here was
    written with the one schema given), decode the rest; a body that does not decode gives nulls
    (PERMISSIVE, as ``from_json`` does), which the required-field filter drops."""
    from pyspark.sql.avro.functions import from_avro

    body = F.expr("substring(value, 6)")
    return _rows(kafka, from_avro(body, args.schema, {"mode": "PERMISSIVE"}), args)


def _rows(kafka: DataFrame, value: Column, args: argparse.Namespace) -> DataFrame:
    records = kafka.select(value.alias("r"), F.col("partition").alias("kafka_partition"),
                           F.col("offset").alias("kafka_offset"))
    rows = records.select("r.*", "kafka_partition", "kafka_offset")
    for field in filter(None, args.required.split(",")):
        rows = rows.where(F.col(field).isNotNull())
    return rows.select(*args.columns.split(",")).withColumn("event_date", F.to_date(args.date_of))
