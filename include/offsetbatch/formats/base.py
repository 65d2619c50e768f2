"""What a value format is: how the Spark job turns Kafka's ``value`` bytes into columns, and which
records it rejects (``_error`` set, with the reason).

Every format's ``parse`` returns the Kafka metadata columns (``META``), ``value``, the parsed fields
and ``_error`` (NULL for good records). ``check`` validates the pipeline's ``value:`` settings at
config load, so a wrong combination fails at DAG parse, naming the field. The seam, in this one
module (as ``sinks/base.py`` holds the sink's): the settings every format draws from
(``ValueSettings``), the ``ValueFormat`` a format subclasses, with its plan-time schema hook and its
jars, and the registry (``FORMATS``, ``register_format``). Nothing here imports pyspark at module
level.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from offsetbatch import validation
from offsetbatch.formats.ddl import ddl_field_names

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from offsetbatch.jobspec import JobSpec
    from offsetbatch.source.schema_registry import SchemaRegistry

ERROR = "_error"
# An ``_error`` that starts with this fails the batch instead of rejecting the record (a writer schema
# the reader cannot read): the job raises before anything is committed, naming the first such record.
FATAL = "fatal: "
META = ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key", "kafka_headers"]
# A format may add this column: why a record is neither a row nor an error (a Debezium heartbeat):
# skipped and counted, never rejected.
SKIP = "_skip"
# ``value.tombstones: delete``: true for a record whose value is null (a Kafka tombstone: "delete this key")
TOMBSTONE = "kafka_tombstone"
# The column Spark's JSON parser puts a record it cannot parse in: never a field of a parsed value.
CORRUPT = "_corrupt_record"
RESERVED = [*META, TOMBSTONE, "value", ERROR, SKIP, CORRUPT]  # names a value's own fields may not take


def carried(frame: "DataFrame", *own: str) -> "Column":
    """The columns of ``frame`` that a step before the format's parse added (the key's parse, the
    tombstone flag), for the parse to carry through: every column but the records' own (``META``,
    ``value``) and ``own``, the ones the format made itself. A column regex that Spark expands when it
    analyzes the plan: asking ``frame`` its columns would be a round trip on Spark Connect, in which
    the server analyzes the plan read so far (docs/performance.md, *A small batch on Spark Connect*)."""
    import re

    names = "|".join(re.escape(name) for name in (*META, "value", *own))
    return frame.colRegex(f"`^(?!(?:{names})$).*$`")


# ---- the ``value:`` and ``key:`` settings ---------------------------------------------------------
# Every field a format may use; the format's ``check`` decides which fit it, so a wrong combination
# fails at config load naming the field.

class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RegistrySubject(_Settings):
    conn_id: str = Field("schema_registry_default", description="Airflow connection of the schema registry "
                         "(offsetbatch.source.schema_registry lists its fields)")
    subject: str | None = Field(None, description="subject of the reader schema; default '<topic>-value' of the "
                                "pipeline's one topic (TopicNameStrategy)")
    version: int | Literal["latest"] = Field("latest", description="the reader schema's version; 'latest' is "
                                             "pinned when a batch is planned and recorded with it")
    writer_subjects: list[str] | None = Field(None, description="subjects whose versions the records may be "
                                              "written with; default [subject]")

    @field_validator("version")
    @classmethod
    def _from_one(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError("a subject version is a number from 1, or 'latest'")
        return v


class ValueSettings(_Settings):
    format: str = Field("json", description="a registered value format (``formats.FORMATS``): 'json', 'raw', "
                        "'avro', 'confluent-avro', 'confluent-json', 'confluent-protobuf', 'debezium' or 'debezium-avro' built in")
    schema_ddl: str | None = Field(None, alias="schema", description="Spark DDL, e.g. 'id STRING, n INT'")
    required: list[str] = Field(default_factory=list, description="fields that must be present and non-null")
    avro_schema: str | None = Field(None, description="Avro reader schema: inline JSON, or an .avsc file "
                                    "(relative to the pipeline file)")
    schema_registry: RegistrySubject | None = Field(None, description="where confluent-avro's and confluent-protobuf's "
                                                    "schemas are")
    schema_id: Literal["auto", "prefix", "header"] = Field(
        "auto", description="where a Confluent-framed value names its schema: the 5-byte prefix, the "
        "__value_schema_id header, or either (auto; the job then reads every record's headers)")
    tombstones: Literal["reject", "delete"] = Field(
        "reject", description="a record whose value is null (a Kafka tombstone): rejected ('null value'), or kept as "
        "a row whose value fields are NULL and whose kafka_tombstone column is true (delete: an upsert sink's "
        "delete_column can name it); a tombstone without a key is rejected either way")

    @field_validator("format")
    @classmethod
    def _known_format(cls, v: str) -> str:
        if v not in FORMATS:
            raise ValueError(f"must be one of {', '.join(repr(f) for f in sorted(FORMATS))}, got {v!r}")
        return v

    @field_validator("schema_ddl")
    @classmethod
    def _ddl_parses(cls, v: str | None) -> str | None:
        """A DDL typo would otherwise fail only in the Spark job, after the batch was planned."""
        if v is not None:
            validation.check_schema_ddl(v, reserved=RESERVED)
        return v

    @model_validator(mode="after")
    def _fits_format(self) -> "ValueSettings":
        format_of(self.format).check(self)
        return self

    @property
    def parser(self) -> type["ValueFormat"]:
        """The format these settings name: what callers ask instead of comparing its name."""
        return format_of(self.format)

    @property
    def options(self) -> dict:
        """The fields a format's own ``Settings`` adds to these (the job gets them in its spec)."""
        return self.model_dump(include=set(type(self).model_fields) - set(ValueSettings.model_fields))


def settings_for(value: Any) -> ValueSettings:
    """Validate a ``value:`` or ``key:`` mapping with its format's settings model (``ValueFormat.Settings``);
    an unknown format is refused naming the ``format`` field."""
    if isinstance(value, ValueSettings):
        return value
    if isinstance(value, dict) and value.get("format", "json") in FORMATS:
        return FORMATS[value.get("format", "json")].Settings.model_validate(value)
    return ValueSettings.model_validate(value)


@dataclass(frozen=True)
class SchemaContext:
    """What a format's plan-time schema hook knows of the pipeline: its name (for messages), whether
    it parses values or keys, the topics it reads (``None``: a pattern), the folder relative schema
    files start from, and how to open the schema registry (``None``: the settings' connection)."""

    pipeline: str
    role: str = "value"
    topics: tuple[str, ...] | None = None
    base_dir: Path | None = None
    registry: "Callable[[], SchemaRegistry] | None" = None


class ResolvedSchemas(Protocol):
    """Schemas a format resolved in the plan task for one batch: written into its job spec
    (``to_spec``), logged (``describe``), recorded with the batch in the ledger (``recorded``)."""

    def to_spec(self) -> dict: ...

    def describe(self) -> str: ...

    def recorded(self) -> dict: ...


class ValueFormat(ABC):
    name: ClassVar[str]
    # The format's settings model: ``ValueSettings`` or a subclass adding the format's own fields.
    Settings: ClassVar[type[ValueSettings]] = ValueSettings
    keeps_value: ClassVar[bool] = True  # whether the raw ``value`` column stays in the output rows
    # Parsing marks records that are neither rows nor rejected (a Debezium heartbeat) in a ``SKIP``
    # column: the job counts and drops them (it does not ask the parsed frame for its columns).
    skips: ClassVar[bool] = False
    # Parsing leaves the bytes as they are (``raw``): a key in such a format adds no ``key`` column.
    leaves_bytes: ClassVar[bool] = False
    # Spark artifacts the job needs for this format, by artifact id (``dag.spark_jars`` finds them).
    jars: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def check(cls, value: "ValueSettings") -> None:
        """Raise ``ValueError`` if the ``value:`` settings do not fit this format."""
        cls._refuse(value, "avro_schema", "schema_registry")

    @classmethod
    def check_files(cls, value: "ValueSettings", base_dir: "Path | None") -> None:
        """Raise ``ValueError`` if a file the settings name does not load (relative to ``base_dir``)."""

    @classmethod
    def check_topics(cls, value: "ValueSettings", role: str, topics: list[str] | None) -> None:
        """Raise ``ValueError`` if the settings cannot work for these topics (``None``: a pattern)."""

    @classmethod
    def resolve_schemas(cls, value: "ValueSettings", context: SchemaContext) -> "ResolvedSchemas | None":
        """The schemas a batch planned now is decoded with, found by the plan task before the ledger
        is opened (the job never asks a registry); ``None`` for a format that needs none."""
        return None

    @classmethod
    def refresh_schemas(cls, value: "ValueSettings", schemas: "ResolvedSchemas | None",
                        context: SchemaContext) -> "ResolvedSchemas | None":
        """``schemas`` with what appeared while the plan ran (the plan task calls it after planning)."""
        return schemas

    @classmethod
    def keep_planned(cls, value: "ValueSettings", schemas: "ResolvedSchemas | None",
                     planned: dict | None) -> "ResolvedSchemas | None":
        """A replay's schemas: ``schemas`` (today's) still able to decode what the replayed batch was
        planned with (``planned``: its job spec's schemas, ``None`` when it had none)."""
        return schemas

    @classmethod
    def output_columns(cls, value: "ValueSettings", base_dir: "Path | None" = None) -> list[str] | None:
        """The columns of a good record's output row when no transform changes them (``None``: known
        only when a batch is planned)."""
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


# The value formats by name: what ``value.format`` and ``key.format`` may say. A format is added with
# one line, ``register_format(MyFormat)`` (``offsetbatch.formats`` registers the built-in ones);
# nothing outside ``formats/`` asks which format it has, only what the format can do.
FORMATS: dict[str, type[ValueFormat]] = {}


def register_format(fmt: type[ValueFormat]) -> type[ValueFormat]:
    """Make ``fmt`` a value format under its ``name`` (a decorator too)."""
    FORMATS[fmt.name] = fmt
    return fmt


def format_of(name: str) -> type[ValueFormat]:
    """The format ``name`` (``KeyError`` for an unknown one: ``ValueSettings`` refuses those at load)."""
    return FORMATS[name]
