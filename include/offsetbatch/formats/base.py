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
    from pathlib import Path

    from pyspark.sql import DataFrame

    from offsetbatch.config import ValueSettings
    from offsetbatch.jobspec import JobSpec

ERROR = "_error"
# An ``_error`` that starts with this fails the batch instead of rejecting the record (a writer schema
# the reader cannot read): the job raises before anything is committed, naming the first such record.
FATAL = "fatal: "
META = ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key", "kafka_headers"]


class ValueFormat(ABC):
    name: ClassVar[str]
    keeps_value: ClassVar[bool] = True  # whether the raw ``value`` column stays in the output rows

    @classmethod
    def check(cls, value: "ValueSettings") -> None:
        """Raise ``ValueError`` if the ``value:`` settings do not fit this format."""
        cls._refuse(value, "avro_schema", "schema_registry")

    @classmethod
    def check_files(cls, value: "ValueSettings", base_dir: "Path | None") -> None:
        """Raise ``ValueError`` if a file the settings name does not load (relative to ``base_dir``)."""

    @classmethod
    def output_columns(cls, value: "ValueSettings", base_dir: "Path | None" = None) -> list[str] | None:
        """The columns of a good record's output row when no transform changes them (``None``: known
        only when a batch is planned)."""
        from offsetbatch.formats.json_value import ddl_field_names

        ddl = value.schema_ddl
        return [*META, *(["value"] if cls.keeps_value else []), *(ddl_field_names(ddl) if ddl else [])]

    @classmethod
    def reads_headers(cls, spec: "JobSpec") -> bool:
        """Whether parsing needs the records' headers (Spark reads them only when asked)."""
        return False

    @classmethod
    @abstractmethod
    def parse(cls, records: "DataFrame", spec: "JobSpec") -> "DataFrame":
        """``META`` + ``value`` + parsed fields + ``_error`` for every record."""

    @staticmethod
    def _refuse(value: "ValueSettings", *names: str) -> None:
        given = [type(value).model_fields[n].alias or n for n in names if getattr(value, n) not in (None, [], "")]
        if given:
            raise ValueError(f"format {value.format!r} takes no {', '.join(repr(n) for n in given)}")
