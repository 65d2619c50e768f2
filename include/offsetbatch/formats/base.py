"""What a value format is: how the Spark job turns Kafka's ``value`` bytes into columns, and which
records it rejects (``_error`` set, with the reason).

Every format's ``parse`` returns the Kafka metadata columns (``META``), ``value``, the parsed fields
and ``_error`` (NULL for good records). ``check`` validates the pipeline's ``value:`` settings at
config load, so a wrong combination fails at DAG parse, naming the field. Nothing here imports
pyspark at module level.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from offsetbatch.jobspec import JobSpec

ERROR = "_error"
META = ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key", "kafka_headers"]


class ValueFormat(ABC):
    name: ClassVar[str]
    keeps_value: ClassVar[bool] = True  # whether the raw ``value`` column stays in the output rows

    @classmethod
    def check(cls, schema_ddl: str | None, required: list[str]) -> None:
        """Raise ``ValueError`` if the ``value:`` settings do not fit this format."""

    @classmethod
    def output_columns(cls, schema_ddl: str | None) -> list[str]:
        """The columns of a good record's output row when no transform changes them."""
        from offsetbatch.formats.json_value import ddl_field_names

        return [*META, *(["value"] if cls.keeps_value else []), *(ddl_field_names(schema_ddl) if schema_ddl else [])]

    @classmethod
    @abstractmethod
    def parse(cls, records: "DataFrame", spec: "JobSpec") -> "DataFrame":
        """``META`` + ``value`` + parsed fields + ``_error`` for every record."""
