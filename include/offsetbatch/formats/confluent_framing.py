"""Confluent's wire framing as Spark columns: which writer schema a record names, and where its body
starts. The byte layouts are documented in ``offsetbatch.formats.confluent_wire`` (the plan task's pure
Python reader of the same bytes); this is the job's reading of them, one expression per record.

* prefix v0: ``0x00`` + 4-byte big-endian schema id, then the body;
* prefix v1: ``0x01`` + 16-byte GUID, then the body;
* header: a ``__value_schema_id`` header holds ``0x01`` + GUID and the value is the bare body.

``schema_id`` (the pipeline's ``value.schema_id``) says where to look: ``prefix`` (the headers are
not even read), ``header``, or ``auto`` (the header when the record has one, else the prefix, as
confluent-kafka's own deserializer does).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from offsetbatch.formats.confluent_wire import GUID_PREFIX_LEN, KEY_HEADER, MAGIC_GUID, MAGIC_ID, PREFIX_LEN, VALUE_HEADER

if TYPE_CHECKING:
    from pyspark.sql import Column

    from offsetbatch.jobspec import JobSpec


@dataclass(frozen=True)
class Framing:
    """A record's framing, as columns: ``writer`` (BIGINT: the key of the writer schema the record
    names among those given, NULL if none), ``named`` (STRING: what the record names, ``schema id
    7`` or ``schema GUID <32 hex digits>``, for messages), ``body`` (BINARY) and ``error`` (NULL, or
    why the bytes are not Confluent-framed).

    A good record costs a few byte comparisons: ``writer`` matches the record's first bytes (or its
    header) against each writer's own framing bytes, and ``named`` turns bytes into text only when
    a message needs it (Spark evaluates a ``CASE`` branch only for the rows that take it)."""

    writer: "Column"
    named: "Column"
    body: "Column"
    error: "Column"
    # ``header_tail`` framings: what follows the GUID in the header (BINARY; NULL when the record names
    # its schema in the value). Confluent's Protobuf serializer puts the message indexes there.
    tail: "Column | None" = None


def _guid_bytes(guid: str) -> bytes:
    return uuid.UUID(guid).bytes


def framing(where: str, header_name: str = VALUE_HEADER, writers: Mapping[int, str | None] | None = None,
            header_tail: bool = False) -> Framing:
    """The framing of ``value``; ``where`` is the pipeline's ``value.schema_id`` (or ``key.schema_id``,
    with ``header_name`` the key's header, when ``value`` holds the key); ``writers``: the writer
    schemas' ids and GUIDs (None when the format does not look the schema up), newest first;
    ``header_tail``: the header may go on after the GUID (``Framing.tail``: Protobuf's message indexes)."""
    from pyspark.sql import functions as F

    writers = dict(writers or {})
    value = F.col("value")
    v0 = F.startswith(value, F.lit(bytes([MAGIC_ID])))
    v1 = F.startswith(value, F.lit(bytes([MAGIC_GUID])))
    prefix_writer = F.lit(None).cast("bigint")
    for key, guid in reversed(list(writers.items())):  # the first (newest) writer is tested first
        found = F.startswith(value, F.lit(bytes([MAGIC_ID]) + key.to_bytes(4, "big")))
        if guid:
            found = found | F.startswith(value, F.lit(bytes([MAGIC_GUID]) + _guid_bytes(guid)))
        prefix_writer = F.when(found, F.lit(key).cast("bigint")).otherwise(prefix_writer)
    prefix_named = (F.when(v0, F.concat(F.lit("schema id "), F.conv(F.hex(F.substring(value, 2, 4)), 16, 10)))
                    .when(v1, F.concat(F.lit("schema GUID "), F.lower(F.hex(F.substring(value, 2, 16))))))
    prefix_body = (F.when(v0, F.expr(f"substring(value, {PREFIX_LEN + 1})"))
                   .when(v1, F.expr(f"substring(value, {GUID_PREFIX_LEN + 1})")))
    first_byte = F.concat(F.lit("0x"), F.lower(F.hex(F.substring(value, 1, 1))))
    prefix_error = (
        F.when(F.length(value) == 0, F.lit("not Confluent-framed: the value is empty"))
        .when(~(v0 | v1), F.concat(F.lit("not Confluent-framed: first byte "), first_byte,
                                   F.lit(f", expected 0x00 (schema id) or 0x01 (GUID), and no {header_name} header")))
        .when(v0 & (F.length(value) < PREFIX_LEN), F.lit(f"not Confluent-framed: shorter than the {PREFIX_LEN}-byte "
                                                          f"prefix"))
        .when(v1 & (F.length(value) < GUID_PREFIX_LEN),
              F.lit(f"not Confluent-framed: shorter than the {GUID_PREFIX_LEN}-byte GUID prefix"))
    )
    if where == "prefix":
        return Framing(prefix_writer, prefix_named, prefix_body, prefix_error)
    header = F.try_element_at(F.filter("kafka_headers", lambda h: h["key"] == F.lit(header_name)), F.lit(1))["value"]
    header_writer = F.lit(None).cast("bigint")
    for key, guid in reversed(list(writers.items())):
        if guid:
            tagged = F.lit(bytes([MAGIC_GUID]) + _guid_bytes(guid))
            found = F.startswith(header, tagged) if header_tail else header == tagged
            header_writer = F.when(found, F.lit(key).cast("bigint")).otherwise(header_writer)
    header_ok = F.startswith(header, F.lit(bytes([MAGIC_GUID]))) & (
        F.length(header) >= GUID_PREFIX_LEN if header_tail else F.length(header) == GUID_PREFIX_LEN)
    header_named = F.concat(F.lit("schema GUID "), F.lower(F.hex(F.substring(header, 2, 16))))
    header_error = F.when(~header_ok, F.lit(f"the {header_name} header is not 0x01 + a 16-byte GUID"
                                            f"{' (+ message indexes)' if header_tail else ''}"))
    tail = F.substring(header, GUID_PREFIX_LEN + 1, 1 << 30) if header_tail else None
    if where == "header":
        return Framing(header_writer, header_named, value,
                       F.when(header.isNull(), F.lit(f"no {header_name} header (schema_id is 'header')"))
                       .otherwise(header_error), tail)
    has_header = header.isNotNull()
    return Framing(F.when(has_header, header_writer).otherwise(prefix_writer),
                   F.when(has_header, header_named).otherwise(prefix_named),
                   F.when(has_header, value).otherwise(prefix_body),
                   F.when(has_header, header_error).otherwise(prefix_error),
                   F.when(has_header, tail) if tail is not None else None)


class ConfluentFramed:
    """Trait of a format whose records name their schema Confluent's way: the headers are read
    unless ``schema_id`` says the prefix, and ``framing_of`` reads the spec's framing (the key's
    view of a spec looks at ``__key_schema_id``) against the spec's writer schemas."""

    @classmethod
    def reads_headers(cls, spec: "JobSpec") -> bool:
        return spec.schema_id != "prefix"

    @staticmethod
    def framing_of(spec: "JobSpec", header_tail: bool = False) -> Framing:
        writers = (getattr(spec, "value_schemas", None) or {}).get("writers") or {}
        by_key = {int(k): w.get("guid") for k, w in sorted(writers.items(), key=lambda kv: -int(kv[0]))}
        header = KEY_HEADER if getattr(spec, "role", "value") == "key" else VALUE_HEADER
        return framing(spec.schema_id, header, by_key, header_tail)
