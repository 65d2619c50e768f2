"""``avro`` and ``confluent-avro``: values in Avro's binary encoding, decoded by Spark's ``from_avro``
(spark-avro_2.13, ``dag.spark_jars``) into the reader schema's fields.

* ``avro``: the bare Avro body of one record, written with the schema the pipeline names
  (``value.avro_schema``: inline JSON or an ``.avsc`` file).
* ``confluent-avro``: written by a Confluent schema-registry serializer. The record names its writer
  schema (``formats.confluent_framing``); the plan task fetched every writer schema the batch may
  name from the registry and put them in the job spec (``formats.avro_schemas``), with the reader
  schema (``value.schema_registry`` subject and version, ``latest`` pinned at plan time, or
  ``value.avro_schema``). Each record is decoded with its writer schema into the reader schema, so
  old and new records land in one shape (Avro schema resolution: a field the writer did not have
  takes the reader's default).

Records are rejected (``_error``) for: a null value; bytes that are not Confluent-framed; a schema id
or GUID that is not among the writer schemas the plan task found; a body that does not decode; a
string whose bytes are not UTF-8 (``from_avro`` copies them unchecked; ``avro_schema.text_fields``); a
required field that is null. A writer schema the reader cannot read (incompatible) is not a record's
fault: such a record fails the batch (``formats.base.FATAL``), naming the field, before anything is
committed.

Why "does not decode" is exact: ``from_avro`` in PERMISSIVE mode gives a struct of nulls for bytes
it cannot decode (not a null struct), and FAILFAST would fail the whole job. A good record decodes
to all nulls only when its body is the one encoding of "every field null" for its writer schema
(``formats.avro_schema.all_null_body``; none when a field cannot be null), so a struct of nulls with
any other body is a failure, and a record whose fields are legitimately null is never rejected.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from offsetbatch.formats import avro_schema, avro_schemas
from offsetbatch.formats.avro_schemas import PLAIN_WRITER, ValueSchemas, check_reader_fields
from offsetbatch.formats.base import ERROR, FATAL, META, SchemaContext, ValueFormat, ValueSettings, carried
from offsetbatch.formats.confluent_framing import ConfluentFramed

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import Column, DataFrame

    from offsetbatch.jobspec import JobSpec

class AvroFormat(ValueFormat):
    name = "avro"
    keeps_value = False
    jars = ("spark-avro_2.13",)  # Spark's from_avro

    @classmethod
    def check(cls, value: "ValueSettings") -> None:
        cls._refuse(value, "schema_ddl", "schema_registry")
        if not value.avro_schema:
            raise ValueError(f"format {value.format!r} needs 'avro_schema' (inline JSON or an .avsc file)")

    @classmethod
    def check_files(cls, value: "ValueSettings", base_dir: "Path | None") -> None:
        if value.avro_schema:
            text = avro_schema.load_text(value.avro_schema, base_dir)
            check_reader_fields(avro_schema.field_names(text), list(value.required), "avro_schema")

    @classmethod
    def output_columns(cls, value: "ValueSettings", base_dir: "Path | None" = None) -> list[str] | None:
        if not value.avro_schema:
            return None
        return [*META, *avro_schema.field_names(avro_schema.load_text(value.avro_schema, base_dir))]

    @classmethod
    def resolve_schemas(cls, value: "ValueSettings", context: SchemaContext) -> ValueSchemas:
        return avro_schemas.of_file(value, context)

    @classmethod
    def keep_planned(cls, value: "ValueSettings", schemas: "ValueSchemas | None",
                     planned: dict | None) -> "ValueSchemas | None":
        return avro_schemas.with_planned(schemas, planned)

    @classmethod
    def parse(cls, records: "DataFrame", spec: "JobSpec") -> "DataFrame":
        from pyspark.sql import functions as F

        return decode(records, spec, F.lit(int(PLAIN_WRITER)).cast("bigint"), F.lit("value.avro_schema"),
                      F.col("value"), None)


class ConfluentAvroFormat(ConfluentFramed, AvroFormat):
    name = "confluent-avro"

    @classmethod
    def check(cls, value: "ValueSettings") -> None:
        cls._refuse(value, "schema_ddl")
        if value.schema_registry is None:
            raise ValueError(f"format {value.format!r} needs 'schema_registry' (at least its conn_id): the writer "
                             f"schemas are fetched from it")

    @classmethod
    def check_topics(cls, value: "ValueSettings", role: str, topics: list[str] | None) -> None:
        ref = value.schema_registry
        if not (ref and (ref.subject or value.avro_schema)) and len(topics or []) != 1:
            raise ValueError(f"{role}.schema_registry.subject is needed when the pipeline reads more than one topic "
                             f"or a pattern (the default, '<topic>-{role}', needs exactly one topic); or give "
                             f"{role}.avro_schema as the reader schema and {role}.schema_registry.writer_subjects")

    @classmethod
    def resolve_schemas(cls, value: "ValueSettings", context: SchemaContext) -> ValueSchemas:
        return avro_schemas.from_registry(value, context)

    @classmethod
    def refresh_schemas(cls, value: "ValueSettings", schemas: "ValueSchemas | None",
                        context: SchemaContext) -> "ValueSchemas | None":
        return avro_schemas.refreshed(value, schemas, context)

    @classmethod
    def parse(cls, records: "DataFrame", spec: "JobSpec") -> "DataFrame":
        frame = cls.framing_of(spec)
        return decode(records, spec, frame.writer, frame.named, frame.body, frame.error)


def decode(records: "DataFrame", spec: "JobSpec", writer_id: "Column", named: "Column", body: "Column",
           framing_error: "Column | None") -> "DataFrame":
    """Each record's ``body`` decoded with the writer schema ``writer_id`` (NULL: none of the spec's
    writers; ``named`` says what the record named instead) into the reader."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    schemas = spec.value_schemas
    reader = schemas["reader"]
    fields = [f["name"] for f in json.loads(reader)["fields"]]
    options = {"mode": "PERMISSIVE", "avroSchema": reader}
    writers = schemas["writers"]
    usable = {k: w for k, w in writers.items() if not w.get("incompatible")}
    df = records.withColumns({"_writer": writer_id, "_body": body})  # each computed once, however often used
    writer, body = F.col("_writer"), F.col("_body")
    decoded = F.when(F.lit(False), from_avro(body, reader, options))  # the reader's type when no writer is usable
    expected_null = F.lit(None).cast("binary")
    fatal = F.lit(None).cast("string")
    for key, schema in writers.items():
        is_writer = writer == int(key)
        if key in usable:
            decoded = decoded.when(is_writer, from_avro(body, schema["schema"], options))
            if schema.get("all_null") is not None:
                expected_null = F.when(is_writer, F.lit(bytes.fromhex(schema["all_null"]))).otherwise(expected_null)
        else:
            fatal = F.when(is_writer, F.lit(f"{FATAL}the reader schema ({describe_reader(schemas)}) cannot read "
                                            f"writer {describe_writer(key, schema)}: {schema['incompatible']}. Make "
                                            f"the reader compatible (give the field a default, or pin the reader to a "
                                            f"version that can read it), then run again")).otherwise(fatal)
    df = df.withColumn("_decoded", decoded)
    decoded_col = F.col("_decoded")
    all_null = F.lit(True)
    for f in fields:
        all_null = all_null & decoded_col[f].isNull()
    missing = F.concat_ws(", ", *[F.when(decoded_col[f].isNull(), F.lit(f)) for f in spec.required])
    any_missing = F.lit(False)
    for f in spec.required:
        any_missing = any_missing | decoded_col[f].isNull()
    where = describe_writers(schemas)
    not_utf8 = [(f, check) for f, shape in avro_schema.text_fields(reader).items()
                if (check := _not_utf8(decoded_col[f], shape)) is not None]
    error = F.when(F.col("value").isNull(), F.lit("null value"))
    if framing_error is not None:
        error = error.when(framing_error.isNotNull(), framing_error)
    error = (
        error.when(writer.isNull(), F.concat(named, F.lit(f" is not among the writer schemas ({where})")))
        .when(fatal.isNotNull(), fatal)
        .when(all_null & ~F.coalesce(body == expected_null, F.lit(False)),
              F.concat(F.lit("Avro body does not decode with writer schema id "), writer.cast("string")))
    )
    for f, check in not_utf8:  # Spark copies a string's bytes unchecked: a reader of the table would fail on it
        error = error.when(check, F.lit(f"field {f} holds a string that is not valid UTF-8"))
    error = error.when(any_missing, F.concat(F.lit("missing required field(s): "), missing))
    return df.select(*META, "value", *[decoded_col[f].alias(f) for f in fields], error.alias(ERROR),
                     carried(df, "_writer", "_body", "_decoded"))


def _not_utf8(column: "Column", shape) -> "Column | None":
    """True where ``column`` (of the shape ``avro_schema.text_fields`` gives) holds a string that is
    not valid UTF-8, NULL-safe; ``None`` when it holds no string."""
    from pyspark.sql import functions as F

    if shape == "string":
        return F.coalesce(~F.is_valid_utf8(column), F.lit(False))
    if not isinstance(shape, dict):
        return None
    checks = []
    if "record" in shape:
        checks = [c for name, inner in shape["record"].items() if (c := _not_utf8(column[name], inner)) is not None]
    elif "union" in shape:
        checks = [c for i, inner in shape["union"] if (c := _not_utf8(column[f"member{i}"], inner)) is not None]
    elif "array" in shape:
        checks = [F.coalesce(F.exists(column, lambda x: _not_utf8(x, shape["array"])), F.lit(False))]
    elif "map" in shape:
        checks = [F.coalesce(F.exists(F.map_keys(column), lambda k: _not_utf8(k, "string")), F.lit(False))]
        if shape["map"] is not None:
            checks.append(F.coalesce(F.exists(F.map_values(column), lambda v: _not_utf8(v, shape["map"])),
                                     F.lit(False)))
    if not checks:
        return None
    combined = checks[0]
    for c in checks[1:]:
        combined = combined | c
    return combined


def describe_reader(schemas: dict) -> str:
    source = schemas.get("reader_from") or {}
    if "subject" in source:
        return f"subject '{source['subject']}' version {source['version']}, id {source['id']}"
    return source.get("file", "value.avro_schema")


def describe_writer(key: str, writer: dict) -> str:
    if writer.get("subject"):
        return f"schema id {key} (subject '{writer['subject']}' version {writer['version']})"
    return "value.avro_schema" if key == PLAIN_WRITER else f"schema id {key}"


def describe_writers(schemas: dict) -> str:
    subjects = schemas.get("writer_subjects") or []
    return (f"the versions of subject(s) {', '.join(subjects)} at plan time" if subjects
            else "value.avro_schema")
