"""``confluent-json``: JSON written by Confluent's JSON Schema serializer. The value is the
5-byte prefix (or a ``__value_schema_id`` header) and then JSON, which is parsed exactly as ``json``
parses a value, with the pipeline's Spark DDL. The schema id is not looked up: the DDL is the
schema. Bytes that are not Confluent-framed are rejected with the reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

from offsetbatch.formats.confluent_framing import ConfluentFramed
from offsetbatch.formats.json_value import JsonFormat, parse_json_body

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from offsetbatch.jobspec import JobSpec


class ConfluentJsonFormat(ConfluentFramed, JsonFormat):
    name = "confluent-json"

    @classmethod
    def parse(cls, records: "DataFrame", spec: "JobSpec") -> "DataFrame":
        frame = cls.framing_of(spec)
        return parse_json_body(records, spec, frame.body, frame.error)
