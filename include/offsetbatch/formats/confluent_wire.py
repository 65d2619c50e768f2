"""How a record written by Confluent's serializers names its writer schema: pure Python, no
registry client, no pyspark.

Wire formats (confluent-kafka 2.16.1: ``schema_registry/__init__.py``, ``common/serde.py`` ``SchemaId``):

* prefix (v0), written by the default ``schema.id.serializer``, ``prefix_schema_id_serializer``::

      byte 0       0x00  magic byte
      bytes 1-4    schema id, unsigned 32-bit big-endian
      bytes 5-     the Avro binary body (Protobuf: message indexes, zigzag varints, come first)

* header (GUID), written by ``header_schema_id_serializer``: the key or value is the bare body and a
  Kafka header ``__value_schema_id`` (``__key_schema_id`` for a key) holds::

      byte 0       0x01  magic byte v1
      bytes 1-16   the schema's GUID: a UUID's 16 bytes in RFC 4122 (network) order
                   (Protobuf: message indexes follow)

* prefix v1: the same 17 bytes at the start of the key or value, then the body. No 2.16.1
  serializer writes it unless given a custom ``schema.id.serializer``, but its deserializers
  (``SchemaId.from_bytes``) read it, so offsetbatch does too.

The default deserializer (``dual_schema_id_deserializer``) reads the header first, then the prefix:
``schema_ref`` does the same.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from offsetbatch.errors import SchemaWireFormatError

MAGIC_ID = 0  # prefix v0: magic byte + 4-byte schema id
MAGIC_GUID = 1  # header, or prefix v1: magic byte + 16-byte GUID
PREFIX_LEN = 5
GUID_PREFIX_LEN = 17
VALUE_HEADER = "__value_schema_id"
KEY_HEADER = "__key_schema_id"


@dataclass(frozen=True)
class SchemaRef:
    """Which writer schema a key or value names (``schema_id`` or ``guid``), and where its body
    starts in the key or value (0 when a header named the schema)."""

    schema_id: int | None
    guid: str | None
    body_offset: int


def _bad(reason: str, where: str) -> SchemaWireFormatError:
    return SchemaWireFormatError(f"{reason}{f' ({where})' if where else ''}. The producer did not write it with a "
                                 f"Confluent schema registry serializer: check the topic and its producers.")


def parse_confluent_prefix(value: bytes | None, *, where: str = "") -> int:
    """The schema id of a value in the prefix (v0) form: ``0x00`` + 4-byte big-endian id."""
    if not value:
        raise _bad("the value is empty or null, so it names no schema (a Confluent-framed value is at least 5 bytes)", where)
    if value[0] == MAGIC_GUID:
        raise _bad("the value starts with magic byte 1, the GUID prefix (v1) form, not a schema id: read it with "
                   "schema_ref", where)
    if value[0] != MAGIC_ID:
        raise _bad(f"the value starts with byte {value[0]:#04x}, not Confluent's magic byte 0x00", where)
    if len(value) < PREFIX_LEN:
        raise _bad(f"the value is {len(value)} byte(s), shorter than the 5 of Confluent's prefix", where)
    return int(struct.unpack(">I", value[1:PREFIX_LEN])[0])


def _parse_guid(data: bytes, what: str, where: str) -> str:
    if not data or data[0] != MAGIC_GUID:
        first = f"byte {data[0]:#04x}" if data else "nothing"
        raise _bad(f"{what} starts with {first}, not the GUID form's magic byte 0x01", where)
    if len(data) < GUID_PREFIX_LEN:
        raise _bad(f"{what} is {len(data)} byte(s), shorter than the 17 of a magic byte and a GUID", where)
    return str(uuid.UUID(bytes=bytes(data[1:GUID_PREFIX_LEN])))


def parse_schema_id_header(header: bytes | None, *, where: str = "") -> str:
    """The GUID in a ``__value_schema_id``/``__key_schema_id`` header: ``0x01`` + 16-byte UUID."""
    return _parse_guid(header or b"", "the schema id header", where)


def schema_ref(value: bytes | None, headers: Iterable[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None = None,
               *, key: bool = False, where: str = "") -> SchemaRef:
    """The writer schema of a record's value (``key=True``: its key), as confluent-kafka's default
    deserializer finds it: the schema id header first, then the prefix (v0 id or v1 GUID)."""
    name = KEY_HEADER if key else VALUE_HEADER
    pairs = headers.items() if isinstance(headers, Mapping) else (headers or ())
    header = next((v for k, v in pairs if k == name), None)  # the first one, as the deserializer takes
    if header is not None:
        return SchemaRef(None, parse_schema_id_header(header, where=where), 0)
    if value and value[0] == MAGIC_GUID:
        return SchemaRef(None, _parse_guid(value, "the value", where), GUID_PREFIX_LEN)
    return SchemaRef(parse_confluent_prefix(value, where=where), None, PREFIX_LEN)
