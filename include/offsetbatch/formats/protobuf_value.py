"""``confluent-protobuf``: values written by a Confluent schema-registry Protobuf serializer.

The wire format (confluent-kafka 2.16.1 ``ProtobufSerializer``; Confluent's "Wire format" docs)::

    byte 0       0x00  magic byte (or the GUID forms: ``formats.confluent_wire``)
    bytes 1-4    schema id, unsigned 32-bit big-endian
    then         message indexes: a count, then that many indexes, each a zig-zag varint; the
                 single byte 0x00 is the shortcut for [0] (the schema file's first message)
    then         the Protobuf message

In the header form (``SchemaId.guid_to_bytes``) the ``__value_schema_id`` header holds ``0x01`` + the
GUID + the message indexes, and the value is the bare message.

The plan task resolves the reader (a subject's version and message) and every writer version, each
compiled with its references into a ``FileDescriptorSet`` (``formats.protobuf_schemas``, protoc from
grpcio-tools), and puts them in the job spec. The job reads the framing with Spark expressions
(``formats.confluent_framing``, shared with ``confluent-avro``: prefix, GUID prefix, header) and
decodes the rest in Spark's Python workers with a scalar Arrow UDF (``arrow_udf``) and the upb
Protobuf runtime (``formats.protobuf_decode``): Arrow batches of the values in, one Arrow struct column
out, one compiled converter per writer message. Spark's ``from_protobuf`` would be the natural decoder, but ``spark-protobuf_2.13`` is not on
the Maven Central this project may use (docs/architecture.md, "confluent-protobuf").

Records are rejected (``_error``) for: a null value; bytes that are not Confluent-framed; a schema id
or GUID that is not among the writer schemas the plan found; message indexes that do not parse or name
no message of their schema (or another message than the pipeline's); a body that does not parse (a
truncated message, a string that is not UTF-8); a required field that is null. A writer whose version
of the message has a field of another type than the reader's fails the batch (``FATAL``), naming it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from offsetbatch.formats import protobuf_decode, protobuf_schemas
from offsetbatch.formats.base import ERROR, FATAL, META, SchemaContext, ValueFormat, ValueSettings, carried
from offsetbatch.formats.confluent_framing import ConfluentFramed
from offsetbatch.spark_session import is_remote_session

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame

    from offsetbatch.jobspec import JobSpec


class ProtobufSettings(ValueSettings):
    message: str | None = Field(None, description="confluent-protobuf: the full name of the reader schema's message "
                                "the output has the fields of (e.g. 'shop.Event'); default the schema's first")


class ConfluentProtobufFormat(ConfluentFramed, ValueFormat):
    name = "confluent-protobuf"
    Settings = ProtobufSettings
    keeps_value = False

    @classmethod
    def check(cls, value: "ValueSettings") -> None:
        cls._refuse(value, "schema_ddl", "avro_schema")
        if value.schema_registry is None:
            raise ValueError(f"format {value.format!r} needs 'schema_registry' (at least its conn_id): the Protobuf "
                             f"schemas are fetched from it")

    @classmethod
    def check_topics(cls, value: "ValueSettings", role: str, topics: list[str] | None) -> None:
        ref = value.schema_registry
        if not (ref and ref.subject) and len(topics or []) != 1:
            raise ValueError(f"{role}.schema_registry.subject is needed when the pipeline reads more than one topic "
                             f"or a pattern (the default, '<topic>-{role}', needs exactly one topic)")

    @classmethod
    def output_columns(cls, value: "ValueSettings", base_dir: "Path | None" = None) -> list[str] | None:
        return None  # the registry's message: known when a batch is planned

    @classmethod
    def resolve_schemas(cls, value: "ValueSettings", context: SchemaContext) -> protobuf_schemas.ProtobufSchemas:
        return protobuf_schemas.from_registry(value, context)

    @classmethod
    def refresh_schemas(cls, value: "ValueSettings", schemas, context: SchemaContext):
        return protobuf_schemas.refreshed(value, schemas, context)

    @classmethod
    def keep_planned(cls, value: "ValueSettings", schemas, planned: dict | None):
        return protobuf_schemas.with_planned(schemas, planned)

    @classmethod
    def parse(cls, records: "DataFrame", spec: "JobSpec") -> "DataFrame":
        return decode(records, spec, cls.framing_of(spec, header_tail=True))


def decode(records: "DataFrame", spec: "JobSpec", frame) -> "DataFrame":
    from pyspark import cloudpickle
    from pyspark.sql import functions as F
    from pyspark.sql.functions import arrow_udf
    from pyspark.sql.types import StringType, StructField, StructType

    schemas = spec.value_schemas
    reader_type = schemas["reader_type"]
    fields = [f["name"] for f in reader_type["fields"]]
    writers = schemas["writers"]
    usable = {k: {"file": w["file"], "descriptor_set": w["descriptor_set"]}
              for k, w in writers.items() if not w.get("incompatible")}
    subjects = schemas.get("writer_subjects") or []
    where = f"the versions of subject(s) {', '.join(subjects)} at plan time"
    reader = schemas["reader"]
    fatal = F.lit(None).cast("string")
    for key, w in writers.items():
        if w.get("incompatible"):
            fatal = F.when(frame.writer == int(key), F.lit(
                f"{FATAL}the reader schema (subject '{reader['subject']}' version {reader['version']}, id {reader['id']}, "
                f"message {reader['message']}) cannot read writer schema id {key} (subject '{w.get('subject')}' version "
                f"{w.get('version')}): {w['incompatible']}. Make the reader compatible (pin it to a version that can "
                f"read it), then run again")).otherwise(fatal)
    pre = (F.when(F.col("value").isNull(), F.lit("null value"))
           .when(frame.error.isNotNull(), frame.error)
           .when(frame.writer.isNull(), F.concat(frame.named, F.lit(f" is not among the writer schemas ({where})")))
           .when(fatal.isNotNull(), fatal))
    helpers = {protobuf_decode.WRITER: frame.writer,
               protobuf_decode.OFFSET: (F.length("value") - F.length(frame.body)).cast("int"),
               protobuf_decode.HEAD: frame.tail if frame.tail is not None else F.lit(None).cast("binary"),
               protobuf_decode.PRE_ERROR: pre}
    # Shipped by value: executors need the protobuf runtime and pyarrow, not offsetbatch.
    cloudpickle.register_pickle_by_value(protobuf_decode)
    decoder = protobuf_decode.Decoder({"reader": {"message": reader["message"]}, "reader_type": reader_type,
                                       "writers": usable})
    # A scalar Arrow UDF: only the value and the framing's columns cross to Python, one struct column
    # comes back (mapInArrow, which must carry every column both ways, measured 1.4x slower).
    result = StructType([*StructType.fromJson(reader_type).fields, StructField(ERROR, StringType())])
    udf = arrow_udf(decoder.struct, _plain_strings(result) if is_remote_session(records.sparkSession) else result)
    df = records.select(*META, "value", carried(records)).withColumn(
        "_pb", udf(*(helpers[n] for n in (protobuf_decode.WRITER, protobuf_decode.OFFSET, protobuf_decode.HEAD,
                                           protobuf_decode.PRE_ERROR)), F.col("value")))
    decoded = df.select(*META, "value", carried(df, "_pb"), *[F.col("_pb")[f].alias(f) for f in (*fields, ERROR)])
    error = F.col(ERROR)
    if spec.required:
        missing = F.concat_ws(", ", *[F.when(F.col(f).isNull(), F.lit(f)) for f in spec.required])
        any_missing = F.lit(False)
        for f in spec.required:
            any_missing = any_missing | F.col(f).isNull()
        error = F.when(error.isNotNull(), error).when(any_missing, F.concat(F.lit("missing required field(s): "), missing))
    return decoded.select(*META, "value", *fields, error.alias(ERROR), carried(decoded, *fields, ERROR))


def _plain_strings(t):
    """``t`` with every string as Spark Connect's protocol spells the plain ``STRING`` (no collation).
    A PySpark 4.3 ``StringType()`` goes over the wire with collation ``UTF8_BINARY`` named, which the
    server keeps as an explicit collation: the Parquet footers then say "string collate UTF8_BINARY",
    a type the sinks (PostgreSQL's mapping) do not know; an empty collation is the server's plain
    ``StringType`` (``DataTypeProtoConverter``). A cast back to string would not help: the optimizer
    drops it as a no-op."""
    from pyspark.sql.types import ArrayType, MapType, StringType, StructField, StructType

    if isinstance(t, StructType):
        return StructType([StructField(f.name, _plain_strings(f.dataType), f.nullable, f.metadata) for f in t.fields])
    if isinstance(t, ArrayType):
        return ArrayType(_plain_strings(t.elementType), t.containsNull)
    if isinstance(t, MapType):
        return MapType(_plain_strings(t.keyType), _plain_strings(t.valueType), t.valueContainsNull)
    if isinstance(t, StringType) and t.collation == "UTF8_BINARY":
        plain = StringType()
        plain.collation = ""
        return plain
    return t
