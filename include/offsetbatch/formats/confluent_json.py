"""``confluent-json``: JSON written by Confluent's JSON Schema serializer. The value is the
5-byte prefix (or a ``__value_schema_id`` header) and then JSON, which is parsed exactly as ``json``
parses a value, with the pipeline's Spark DDL. The schema id is not looked up: the DDL is the
schema. Bytes that are not Confluent-framed are rejected with the reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

from offsetbatch.formats.json_value import JsonFormat, parse_json_body

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from offsetbatch.jobspec import JobSpec


class ConfluentJsonFormat(JsonFormat):
    name = "confluent-json"

    @classmethod
    def reads_headers(cls, spec: "JobSpec") -> bool:
        return spec.schema_id != "prefix"

    @classmethod
    def parse(cls, records: "DataFrame", spec: "JobSpec") -> "DataFrame":
        from offsetbatch.formats.confluent_framing import framing
        from offsetbatch.source.schema_wire import VALUE_HEADER

        frame = framing(spec.schema_id, getattr(spec, "schema_header", VALUE_HEADER))
        return parse_json_body(records, spec, frame.body, frame.error)
