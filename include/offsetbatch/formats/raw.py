"""``raw``: the value is kept as bytes, untouched; no record is rejected by parsing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from offsetbatch.formats.base import ERROR, ValueFormat, ValueSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from offsetbatch.jobspec import JobSpec


class RawFormat(ValueFormat):
    name = "raw"
    leaves_bytes = True

    @classmethod
    def check(cls, value: "ValueSettings") -> None:
        cls._refuse(value, "schema_ddl", "required", "avro_schema", "schema_registry")

    @classmethod
    def parse(cls, records: "DataFrame", spec: "JobSpec") -> "DataFrame":
        from pyspark.sql import functions as F

        return records.withColumn(ERROR, F.lit(None).cast("string"))
