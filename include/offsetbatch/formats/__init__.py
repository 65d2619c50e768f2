"""Value formats: how the Spark job parses Kafka values, chosen by ``value.format`` in the pipeline
YAML. Adding a format: one module with a ``ValueFormat`` subclass, one line in ``FORMATS``, tests."""

from __future__ import annotations

from offsetbatch.formats.avro_value import AvroFormat, ConfluentAvroFormat
from offsetbatch.formats.base import ERROR, FATAL, META, ValueFormat
from offsetbatch.formats.confluent_json import ConfluentJsonFormat
from offsetbatch.formats.json_value import JsonFormat
from offsetbatch.formats.raw import RawFormat

FORMATS: dict[str, type[ValueFormat]] = {
    RawFormat.name: RawFormat,
    JsonFormat.name: JsonFormat,
    ConfluentJsonFormat.name: ConfluentJsonFormat,
    AvroFormat.name: AvroFormat,
    ConfluentAvroFormat.name: ConfluentAvroFormat,
}
# The struct column a key format other than raw adds to the records (its fields; NULL for a null key).
KEY_COLUMN = "key"
# Formats whose job needs Spark's Avro functions (spark-avro_2.13, ``dag.spark_jars``).
AVRO_FORMATS = (AvroFormat.name, ConfluentAvroFormat.name)

__all__ = ["AVRO_FORMATS", "ERROR", "FATAL", "FORMATS", "KEY_COLUMN", "META", "ValueFormat"]
