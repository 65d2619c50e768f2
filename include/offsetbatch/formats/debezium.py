"""``debezium``: Debezium's change-event envelope in JSON (with or without the converter's
``schema``/``payload`` wrapper), unwrapped into the changed row.

``value.schema`` is the **row's** Spark DDL (the source table's columns), not the envelope's. Each
change event becomes one row:

* ``op`` ``c`` (insert), ``r`` (snapshot read), ``u`` (update): the row is ``after``;
* ``op`` ``d`` (delete): the row is ``before`` (at least the key under PostgreSQL's default replica
  identity), and ``cdc_deleted`` is true: an upsert sink with ``delete_column: cdc_deleted``
  removes the key;
* plus ``cdc_op`` (the op letter) and, with ``value.version`` (``source.lsn``, ``source.ts_ms``,
  ``ts_ms``…), ``cdc_version``: the number that orders a key's changes (an upsert sink's
  ``version_column``).

Not changes, so **skipped and counted, never rejected**: the tombstone Debezium writes after a
delete (a null value), heartbeats (an event with ``ts_ms`` and no ``op``), schema-change events
(``ddl`` / ``tableChanges``), logical-decoding messages (``op`` ``m``), and truncates (``op``
``t``) when ``value.truncate: skip``. A truncate is otherwise **fatal**: the batch fails before
anything is committed, naming the record, because no row-level change can say "every row is gone".
Rejected, with the reason: a value that is not UTF-8 or not JSON, an event with an unknown ``op``,
an update without ``after``, a delete without ``before``, a missing required field or version.

``debezium-avro``: the same envelope in Avro behind a schema registry (Debezium with Confluent's
AvroConverter), framed, resolved and decoded as ``confluent-avro`` does (the reader schema is the
envelope's, subject ``<topic>-value``; the row's fields are its ``after`` record's). Heartbeats
and schema-change events go to topics of their own there; a tombstone is skipped the same way.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator

from offsetbatch.formats.avro_value import ConfluentAvroFormat
from offsetbatch.formats.base import ERROR, FATAL, META, SKIP, SchemaContext, ValueFormat, ValueSettings
from offsetbatch.formats.ddl import ddl_field_names
from offsetbatch.formats.json_value import parse_json_body

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from offsetbatch.jobspec import JobSpec

OP, DELETED, VERSION = "cdc_op", "cdc_deleted", "cdc_version"
ROW_OPS = ("c", "r", "u")


class DebeziumSettings(ValueSettings):
    version: str | None = Field(
        None, description="where an event's version is: 'ts_ms' or 'source.<field>' (e.g. source.lsn), a number; "
        "it becomes the column cdc_version")
    truncate: Literal["fail", "skip"] = Field(
        "fail", description="a truncate event (op 't'): fail the batch (default), or skip it")

    @field_validator("version")
    @classmethod
    def _version_path(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = v.split(".")
        if not (v == "ts_ms" or (len(parts) == 2 and parts[0] == "source" and parts[1].isidentifier())):
            raise ValueError(f"must be 'ts_ms' or 'source.<field>' (e.g. 'source.lsn', 'source.ts_ms'), got {v!r}")
        return v


class DebeziumFormat(ValueFormat):
    name = "debezium"
    skips = True  # heartbeats, schema changes, tombstones, messages (``unwrap``)
    Settings = DebeziumSettings
    keeps_value = False

    @classmethod
    def check(cls, value: "ValueSettings") -> None:
        cls._refuse(value, "avro_schema", "schema_registry")
        if not value.schema_ddl:
            raise ValueError("format 'debezium' needs a 'schema': the Spark DDL of the changed row (the source "
                             "table's columns), not of the envelope")
        _check_required_in_row(value, ddl_field_names(value.schema_ddl))

    @classmethod
    def output_columns(cls, value: "ValueSettings", base_dir=None) -> list[str] | None:
        version = [VERSION] if value.options.get("version") else []
        return [*META, *ddl_field_names(value.schema_ddl), OP, DELETED, *version]

    @classmethod
    def parse(cls, records: "DataFrame", spec: "JobSpec") -> "DataFrame":
        from pyspark.sql import functions as F

        version = _option(spec, "version")
        source = f", source STRUCT<{version.split('.')[1]}: BIGINT>" if version and version.startswith("source.") else ""
        event = f"before STRUCT<{spec.schema_ddl}>, after STRUCT<{spec.schema_ddl}>, op STRING, ts_ms BIGINT{source}"
        envelope = f"{event}, payload STRUCT<{event}, ddl: STRING, tableChanges: STRING>, ddl STRING, tableChanges STRING"
        parsed = parse_json_body(records, replace(spec, schema_ddl=envelope, required=[]), F.col("value"),
                                 mismatch=_version_mismatch(version))

        def part(name: str) -> "Column":  # the converter's schemas.enable wraps the event in payload
            return F.coalesce(F.col(f"payload.{name}"), F.col(name))

        op = part("op")
        not_changes = [  # what Debezium's JSON topics carry besides changes (other connectors' topics too)
            (part("ddl").isNotNull() | part("tableChanges").isNotNull(), "schema change event"),
            (part("ts_ms").isNotNull() & part("before").isNull() & part("after").isNull(), "heartbeat"),
        ]
        return unwrap(parsed, spec, part, [(op.isNull() & is_, why) for is_, why in not_changes],
                      envelope_columns=("payload", "ddl", "tableChanges"))


class DebeziumAvroFormat(ConfluentAvroFormat):
    """``debezium-avro``: the envelope in Avro behind a schema registry (Debezium with Confluent's
    AvroConverter): framing, writer schemas and the reader (the envelope's, ``<topic>-value``) as
    ``confluent-avro`` has them; the row's fields are those of the envelope's ``after`` record."""

    name = "debezium-avro"
    skips = True
    Settings = DebeziumSettings

    @classmethod
    def output_columns(cls, value: "ValueSettings", base_dir=None) -> list[str] | None:
        return None  # the row's fields are known once the plan resolved the envelope's schema

    @classmethod
    def resolve_schemas(cls, value: "ValueSettings", context: "SchemaContext"):
        # ``required`` names the row's fields (the envelope's ``after``), not the envelope's: the job checks them
        return super().resolve_schemas(value.model_copy(update={"required": []}), context)

    @classmethod
    def refresh_schemas(cls, value: "ValueSettings", schemas, context: "SchemaContext"):
        return super().refresh_schemas(value.model_copy(update={"required": []}), schemas, context)

    @classmethod
    def parse(cls, records: "DataFrame", spec: "JobSpec") -> "DataFrame":
        from pyspark.sql import functions as F

        parsed = super().parse(records, replace(spec, required=[]))
        return unwrap(parsed, spec, F.col, [])


def _version_mismatch(version: str | None):
    """The reason a JSON event fails the envelope's schema because of its version (``value.version``
    is a BIGINT: ``source.lsn`` as a string, a float, or past 2^63), naming the path and the value."""
    if not version:
        return None

    def reason(text: "Column") -> "Column":
        from pyspark.sql import functions as F

        raw = F.coalesce(F.get_json_object(text, f"$.payload.{version}"), F.get_json_object(text, f"$.{version}"))
        whole = raw.rlike(r"^-?[0-9]{1,19}$") & raw.cast("decimal(20,0)").between(-(2**63), 2**63 - 1)
        return F.when(raw.isNotNull() & ~whole, F.concat(
            F.lit(f"value.version {version} is "), F.substring(raw, 1, 40),
            F.lit(", not a whole number within BIGINT (-2^63 .. 2^63-1): a version orders a key's changes; point "
                  "value.version at a numeric field (source.lsn, ts_ms)")))
    return reason


def _option(spec: "JobSpec", name: str, default=None):
    return (getattr(spec, "value_options", None) or {}).get(name, default)


def _check_required_in_row(value: "ValueSettings", fields: list[str]) -> None:
    clash = [f for f in fields if f in (OP, DELETED, VERSION)]
    if clash:
        raise ValueError(f"the row's schema has {clash[0]!r}, a column the format adds; rename it")
    missing = [f for f in value.required if f not in fields]
    if missing:
        raise ValueError(f"'required' names fields not in the schema: {', '.join(missing)}")


def unwrap(parsed: "DataFrame", spec: "JobSpec", part, not_changes: list, envelope_columns: tuple = ()) -> "DataFrame":
    """The changed row out of a parsed envelope (``part(name)``: an envelope field's column), with
    ``cdc_op``, ``cdc_deleted`` (and ``cdc_version``), the reason to reject in ``_error`` and the
    reason to skip in ``_skip`` (``not_changes``: (condition, reason) pairs the encoding adds): a
    format that returns it says so (``skips``)."""
    from pyspark.sql import functions as F

    op = part("op")
    deleted = op == "d"
    row = F.when(deleted, part("before")).otherwise(part("after"))
    fields = parsed.schema["after"].dataType.fieldNames()
    absent = [f for f in spec.required if f not in fields]
    if absent:
        raise ValueError(f"value.required names {', '.join(absent)}, not a field of the envelope's 'after' row "
                         f"({', '.join(fields)})")
    version = _option(spec, "version")
    version_col = part(version) if version else None
    nothing = F.lit(None).cast("string")
    skip = (F.when(F.col("value").isNull(), F.lit("tombstone (Debezium writes one after each delete)"))
            .when(F.col(ERROR).isNotNull(), nothing))
    for condition, why in not_changes:
        skip = skip.when(condition, F.lit(why))
    skip = skip.when(op == "m", F.lit("logical decoding message (op 'm')"))
    if _option(spec, "truncate", "fail") == "skip":
        skip = skip.when(op == "t", F.lit("truncate (op 't'), value.truncate: skip"))
    missing = F.concat_ws(", ", *[F.when(row[f].isNull(), F.lit(f)) for f in spec.required])
    any_missing = F.lit(False)
    for f in spec.required:
        any_missing = any_missing | row[f].isNull()
    error = (F.when(F.col("value").isNull(), nothing)
             .when(F.col(ERROR).isNotNull(), F.col(ERROR))
             .when(skip.isNotNull(), nothing)
             .when(op.isNull(), F.lit("not a Debezium change event: no 'op' field"))
             .when(op == "t", F.lit(f"{FATAL}a truncate (op 't') of the source table, which no row-level change "
                                    f"can apply: set value.truncate: skip to skip truncates (the table keeps its "
                                    f"rows), or re-snapshot the source table into a new pipeline"))
             .when(~op.isin(*ROW_OPS, "d"), F.concat(F.lit("unknown Debezium op '"), op, F.lit("'")))
             .when(deleted & part("before").isNull(), F.lit("a delete (op 'd') without 'before': the deleted key "
                                                            "is unknown (give the source table a replica "
                                                            "identity that includes the key)"))
             .when(~deleted & part("after").isNull(),
                   F.concat(F.lit("op '"), op, F.lit("' without 'after': the new row is unknown"))))
    if version_col is not None:
        error = error.when(version_col.isNull(), F.lit(f"no version at {version}"))
    error = error.when(~deleted & any_missing, F.concat(F.lit("missing required field(s): "), missing))
    envelope = {"before", "after", "op", "ts_ms", "source", "transaction", *envelope_columns}
    passthrough = [c for c in parsed.columns if c not in (*META, "value", ERROR, *envelope)]
    return parsed.select(*META, "value", *[row[f].alias(f) for f in fields], op.alias(OP),
                         F.coalesce(deleted, F.lit(False)).alias(DELETED),
                         *([version_col.alias(VERSION)] if version_col is not None else []),
                         error.alias(ERROR), skip.alias(SKIP), *passthrough)
