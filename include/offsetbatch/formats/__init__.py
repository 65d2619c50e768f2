"""Value formats: how the Spark job parses Kafka values and keys, chosen by ``value.format`` and
``key.format`` in the pipeline YAML. Adding a format: one module with a ``ValueFormat`` subclass
(its settings checks, its jars, its plan-time schema hook: ``formats.base``), one
``register_format`` line below, tests. Nothing outside this folder branches on a format's name."""

from __future__ import annotations

from offsetbatch.formats.avro_value import AvroFormat, ConfluentAvroFormat
from offsetbatch.formats.base import (ERROR, FATAL, FORMATS, META, SKIP, TOMBSTONE, RegistrySubject, ResolvedSchemas, SchemaContext,
                                     ValueFormat, ValueSettings, format_of, register_format, settings_for)
from offsetbatch.formats.confluent_json import ConfluentJsonFormat
from offsetbatch.formats.debezium import DebeziumAvroFormat, DebeziumFormat
from offsetbatch.formats.json_value import JsonFormat
from offsetbatch.formats.protobuf_value import ConfluentProtobufFormat
from offsetbatch.formats.raw import RawFormat

register_format(RawFormat)
register_format(JsonFormat)
register_format(ConfluentJsonFormat)
register_format(AvroFormat)
register_format(ConfluentAvroFormat)
register_format(DebeziumFormat)
register_format(DebeziumAvroFormat)
register_format(ConfluentProtobufFormat)

# The struct column a key format other than raw adds to the records (its fields; NULL for a null key).
KEY_COLUMN = "key"

__all__ = ["ERROR", "FATAL", "FORMATS", "KEY_COLUMN", "META", "SKIP", "TOMBSTONE", "RegistrySubject", "ResolvedSchemas", "SchemaContext",
           "ValueFormat", "ValueSettings", "format_of", "register_format", "settings_for"]
