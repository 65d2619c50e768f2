"""The ``confluent-protobuf`` format's decoder: Confluent's message indexes, a Protobuf descriptor's
Spark shape, and the converter that turns parsed messages into Arrow columns, in Spark's Python
workers (a scalar Arrow UDF, ``Decoder.struct``: Arrow arrays of the values in, one Arrow struct
array out).

Self-contained on purpose: it imports only the standard library, ``google.protobuf`` (the upb
runtime) and ``pyarrow``, never ``offsetbatch``, and ``formats.protobuf_value`` has cloudpickle ship
it **by value** with the job's function, so executors (a cluster's, a Spark Connect server's) need no
offsetbatch installed, only ``protobuf`` and ``pyarrow`` (which PySpark's Arrow support needs anyway).

Why not Spark's own ``from_protobuf``: ``org.apache.spark:spark-protobuf_2.13`` is not served by the
Maven Central this project may use (docs/architecture.md, "confluent-protobuf").

The Spark shape of a message (``spark_type``), chosen once and documented in docs/architecture.md:

    int32 sint32 sfixed32           integer         uint32 fixed32          long
    int64 sint64 sfixed64           long            uint64 fixed64          decimal(20,0) (exact)
    float / double / bool           float / double / boolean
    string / bytes                  string / binary enum                    string: the value's name
    message                         struct          repeated                array
    map<K, V>                       map             google.protobuf.Timestamp   timestamp (microseconds)
    google.protobuf.*Value wrappers the wrapped type, NULL when unset

A field without presence (a proto3 scalar, repeated, map) is its value, default included; a field with
presence (a message, ``optional``, a ``oneof`` member) is NULL when unset, so of a ``oneof`` only the set
member is not NULL. An enum number the schema does not name (proto3 enums are open) is its number as
text. A recursive message has no Spark shape: ``spark_type`` raises ``RecursiveMessage``.

Records are read with their **writer's** message (the schema id and message indexes they carry) and
land in the **reader's** shape by field name (as Avro's schema resolution does): a field the writer
did not have is NULL, one the reader does not have is dropped. ``incompatibility`` says when a
writer's field cannot land in the reader's column (another type), which the plan task records and
the job turns into a failed batch (``formats.base.FATAL``).
"""

from __future__ import annotations

import base64
import keyword
from typing import Any

import pyarrow as pa  # the Arrow UDF's type hints name it (PySpark reads them to tell the UDF's kind)

TIMESTAMP = "google.protobuf.Timestamp"
WRAPPERS = {
    "google.protobuf.DoubleValue": "double", "google.protobuf.FloatValue": "float",
    "google.protobuf.Int64Value": "long", "google.protobuf.UInt64Value": "decimal(20,0)",
    "google.protobuf.Int32Value": "integer", "google.protobuf.UInt32Value": "long",
    "google.protobuf.BoolValue": "boolean", "google.protobuf.StringValue": "string",
    "google.protobuf.BytesValue": "binary",
}
# FieldDescriptor.TYPE_* (descriptor.proto's numbers) -> Spark type
SCALARS = {1: "double", 2: "float", 3: "long", 4: "decimal(20,0)", 5: "integer", 6: "decimal(20,0)", 7: "long",
           8: "boolean", 9: "string", 12: "binary", 13: "long", 15: "integer", 16: "long", 17: "integer",
           18: "long"}
TYPE_MESSAGE, TYPE_ENUM, TYPE_GROUP = 11, 14, 10

# Column names the job adds around the decoder (in, out)
WRITER, PRE_ERROR, OFFSET, HEAD, ERROR = "_pb_writer", "_pb_error", "_pb_offset", "_pb_head", "_error"
HELPERS = (WRITER, PRE_ERROR, OFFSET, HEAD)


class RecursiveMessage(ValueError):
    """A message that contains itself: Spark types cannot nest without end."""


class IndexError_(ValueError):
    """Message indexes that do not parse."""


# ---- Confluent's message indexes --------------------------------------------------------------

def read_indexes(body: bytes, pos: int = 0) -> tuple[tuple[int, ...], int]:
    """The message indexes at ``body[pos:]`` and where the message starts. Confluent's Protobuf
    serializer writes a count then that many indexes, each a zig-zag varint; a single ``0`` byte
    stands for ``[0]`` (the file's first message). Raises ``IndexError_`` with the reason."""
    count, pos = _zigzag(body, pos)
    if count == 0:
        return (0,), pos
    if count < 0:
        raise IndexError_(f"a negative count of message indexes ({count})")
    if count > len(body) - pos:
        raise IndexError_(f"{count} message indexes announced, but only {len(body) - pos} byte(s) follow")
    out = []
    for _ in range(count):
        value, pos = _zigzag(body, pos)
        if value < 0:
            raise IndexError_(f"a negative message index ({value})")
        out.append(value)
    return tuple(out), pos


def _zigzag(body: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    n = len(body)
    while True:
        if pos >= n:
            raise IndexError_("the message indexes end before their last varint")
        byte = body[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise IndexError_("a message index varint longer than 10 bytes")


def write_indexes(indexes: list[int] | tuple[int, ...]) -> bytes:
    """What Confluent's serializer writes for ``indexes`` (``[0]``: the single ``0`` byte)."""
    if list(indexes) == [0]:
        return b"\x00"
    out = bytearray()
    for v in (len(indexes), *indexes):
        z = (v << 1) ^ (v >> 63)
        while z & ~0x7F:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        out.append(z)
    return bytes(out)


def message_at(file_desc: Any, indexes: tuple[int, ...]) -> Any:
    """The message descriptor ``indexes`` name in ``file_desc`` (the first among the file's top-level
    messages, the next ones among nested messages); ``None`` when one is out of range."""
    candidates = list(file_desc.message_types_by_name.values())
    found = None
    for i in indexes:
        if i >= len(candidates):
            return None
        found = candidates[i]
        candidates = list(found.nested_types)
    return found


def index_of(desc: Any) -> tuple[int, ...]:
    """The message indexes of ``desc`` in its file (the inverse of ``message_at``)."""
    path = []
    while desc.containing_type is not None:
        path.append(list(desc.containing_type.nested_types).index(desc))
        desc = desc.containing_type
    path.append(list(desc.file.message_types_by_name.values()).index(desc))
    return tuple(reversed(path))


# ---- descriptors ------------------------------------------------------------------------------

def pool_of(descriptor_set: bytes | str) -> Any:
    """A descriptor pool holding every file of a serialized ``FileDescriptorSet`` (base64 text too)."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    if isinstance(descriptor_set, str):
        descriptor_set = base64.b64decode(descriptor_set)
    fds = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set)
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:  # protoc --include_imports lists them dependencies first
        pool.Add(f)
    return pool


def _is_map(field: Any) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def spark_type(desc: Any, _seen: tuple[str, ...] = ()) -> dict:
    """The Spark type (its JSON form, ``StructType.fromJson``'s input) of message ``desc``."""
    if desc.full_name in _seen:
        path = " -> ".join((*_seen[_seen.index(desc.full_name):], desc.full_name))
        raise RecursiveMessage(f"message {desc.full_name} contains itself ({path}), which no Spark type can hold")
    seen = (*_seen, desc.full_name)
    return {"type": "struct", "fields": [{"name": f.name, "type": field_type(f, seen), "nullable": True,
                                          "metadata": {}} for f in desc.fields]}


def field_type(field: Any, seen: tuple[str, ...] = ()) -> Any:
    if _is_map(field):
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return {"type": "map", "keyType": _single_type(key, seen), "valueType": _single_type(value, seen),
                "valueContainsNull": True}
    single = _single_type(field, seen)
    if field.is_repeated:
        return {"type": "array", "elementType": single, "containsNull": True}
    return single


def _single_type(field: Any, seen: tuple[str, ...]) -> Any:
    if field.type in (TYPE_MESSAGE, TYPE_GROUP):
        name = field.message_type.full_name
        if name == TIMESTAMP:
            return "timestamp"
        if name in WRAPPERS:
            return WRAPPERS[name]
        return spark_type(field.message_type, seen)
    if field.type == TYPE_ENUM:
        return "string"
    return SCALARS[field.type]


def incompatibility(writer: Any, reader: Any) -> list[str]:
    """The reader's fields that the writer has with another Spark type (``field.nested``), so its
    records cannot land in the reader's columns; empty when it is compatible. Fields are matched by
    name, at every depth (in structs, array elements, map values); a field only one side has is
    fine (NULL, or dropped)."""
    return mismatches(spark_type(writer), spark_type(reader))


def mismatches(wt: Any, rt: Any, path: str = "") -> list[str]:
    """Where a value of Spark type ``wt`` (JSON form) cannot land in type ``rt``, by field path."""
    if wt == rt:
        return []
    if isinstance(wt, dict) and isinstance(rt, dict) and wt["type"] == rt["type"]:
        if wt["type"] == "struct":
            have = {f["name"]: f["type"] for f in wt["fields"]}
            return [m for f in rt["fields"] if f["name"] in have
                    for m in mismatches(have[f["name"]], f["type"], f"{path}.{f['name']}" if path else f["name"])]
        if wt["type"] == "array":
            return mismatches(wt["elementType"], rt["elementType"], f"{path}[]")
        if wt["type"] == "map" and wt["keyType"] == rt["keyType"]:
            return mismatches(wt["valueType"], rt["valueType"], f"{path}{{}}")
    return [f"'{path}' ({_type_text(wt)} in the writer, {_type_text(rt)} in the reader)"]


def _type_text(t: Any) -> str:
    if isinstance(t, str):
        return t
    if t["type"] == "array":
        return f"array<{_type_text(t['elementType'])}>"
    if t["type"] == "map":
        return f"map<{_type_text(t['keyType'])},{_type_text(t['valueType'])}>"
    return "struct<" + ",".join(f"{f['name']}:{_type_text(f['type'])}" for f in t["fields"]) + ">"


def arrow_type(t: Any, timestamp: Any = None) -> Any:
    """The Arrow type Spark exchanges a column of Spark type ``t`` (JSON form) in; ``timestamp``:
    the Arrow type Spark gives timestamps (its session time zone's), default UTC."""
    import pyarrow as pa

    if isinstance(t, str):
        if t == "timestamp" and timestamp is not None:
            return timestamp
        if t.startswith("decimal"):
            p, s = t[len("decimal("):-1].split(",")
            return pa.decimal128(int(p), int(s))
        return {"integer": pa.int32(), "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
                "boolean": pa.bool_(), "string": pa.string(), "binary": pa.binary(),
                "timestamp": pa.timestamp("us", tz="UTC")}[t]
    if t["type"] == "struct":
        return pa.struct([pa.field(f["name"], arrow_type(f["type"], timestamp)) for f in t["fields"]])
    if t["type"] == "array":
        return pa.list_(arrow_type(t["elementType"], timestamp))
    return pa.map_(arrow_type(t["keyType"], timestamp), arrow_type(t["valueType"], timestamp))


# ---- the converter: parsed message -> a tuple in the reader's shape ---------------------------

class _Codegen:
    """Python source of one function per (writer message, reader struct) pair: ``m`` -> a tuple of
    the reader's fields, compiled once per writer and message, so a record costs one attribute read
    per field and no per-field dispatch (``json_format`` is ~10x slower)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, Any] = {}
        self.done: dict[tuple[str, str], str] = {}

    def message(self, writer: Any, reader_type: dict) -> str:
        key = (writer.full_name, repr(reader_type))
        if key in self.done:
            return self.done[key]
        name = f"_m{len(self.done)}"
        self.done[key] = name
        parts = []
        for rf in reader_type["fields"]:
            wf = writer.fields_by_name.get(rf["name"])
            parts.append("None" if wf is None or mismatches(field_type(wf), rf["type"]) else self.field(wf, rf["type"]))
        body = ", ".join(parts) + ("," if len(parts) == 1 else "")
        self.lines.append(f"def {name}(m):\n    return ({body})\n")
        return name

    def field(self, wf: Any, rtype: Any) -> str:
        attr = f"getattr(m, {wf.name!r})" if keyword.iskeyword(wf.name) or not wf.name.isidentifier() else f"m.{wf.name}"
        if _is_map(wf):
            kf, vf = wf.message_type.fields_by_name["key"], wf.message_type.fields_by_name["value"]
            value = self.single(vf, rtype["valueType"], "v")
            if value == "v":
                return f"list({attr}.items())"
            return f"[(k, {value}) for k, v in {attr}.items()]"
        if wf.is_repeated:
            item = self.single(wf, rtype["elementType"], "x")
            return f"list({attr})" if item == "x" else f"[{item} for x in {attr}]"
        value = self.single(wf, rtype, attr)
        if wf.has_presence:
            return f"({value} if m.HasField({wf.name!r}) else None)"
        return value

    def single(self, wf: Any, rtype: Any, expr: str) -> str:
        if wf.type in (TYPE_MESSAGE, TYPE_GROUP):
            full = wf.message_type.full_name
            if full == TIMESTAMP:
                return f"_ts({expr})"
            if full in WRAPPERS:
                return f"{expr}.value"
            return f"{self.message(wf.message_type, rtype)}({expr})"
        if wf.type == TYPE_ENUM:
            table = f"_e{len(self.env)}"
            self.env[table] = {v.number: v.name for v in wf.enum_type.values}
            return f"({table}.get({expr}) or str({expr}))"  # a number the enum does not name: as text
        return expr

    def compile(self, root: str) -> Any:
        env = {**self.env, "_ts": _ts, "_enum": _enum}
        exec("\n".join(self.lines), env)  # noqa: S102 - source built above from descriptors only
        return env[root]


def _ts(t: Any) -> int:
    return t.seconds * 1_000_000 + t.nanos // 1000


def _enum(names: dict, value: int) -> str:
    return names.get(value) or str(value)


def converter(writer: Any, reader_type: dict) -> Any:
    """A function: a parsed message of descriptor ``writer`` -> tuple of the reader's fields."""
    gen = _Codegen()
    return gen.compile(gen.message(writer, reader_type))


# ---- the Arrow UDF ----------------------------------------------------------------------------

class Decoder:
    """The job's decoder (``struct``, a scalar Arrow UDF) of ``value`` and four columns the job
    computed from Confluent's framing: ``_pb_writer`` (the schema id of a known writer, else NULL),
    ``_pb_offset`` (where the message indexes start in ``value``), ``_pb_head`` (the header form's:
    the ``__value_schema_id`` header after its GUID, holding the message indexes, while the value is
    the bare message; else NULL) and ``_pb_error`` (why the record is rejected before its body is
    looked at: a null value, bad framing, an unknown schema id). Gives the reader's fields and
    ``_error`` as one struct column."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec  # {"reader": {...}, "reader_type": {...}, "writers": {id: {...}}}
        self._writers: dict[int, Any] = {}
        self._parsers: dict[tuple[int, tuple[int, ...]], Any] = {}

    def _writer(self, key: int) -> Any:
        found = self._writers.get(key)
        if found is None:
            entry = self.spec["writers"][str(key)]
            pool = pool_of(entry["descriptor_set"])
            found = self._writers[key] = pool.FindFileByName(entry["file"])
        return found

    def parser(self, key: int, indexes: tuple[int, ...]) -> tuple[Any, Any] | str:
        """(parse, convert) for the message ``indexes`` name in writer ``key``, or why none."""
        found = self._parsers.get((key, indexes))
        if found is None:
            found = self._parsers[(key, indexes)] = self._make_parser(key, indexes)
        return found

    def _make_parser(self, key: int, indexes: tuple[int, ...]) -> tuple[Any, Any] | str:
        from google.protobuf import message_factory

        file_desc = self._writer(key)
        desc = message_at(file_desc, indexes)
        if desc is None:
            return (f"message indexes {list(indexes)} name no message of schema id {key} (its file has "
                    f"{len(file_desc.message_types_by_name)} top-level message(s))")
        reader = self.spec["reader"]["message"]
        if desc.full_name != reader:
            return (f"message indexes {list(indexes)} of schema id {key} name message {desc.full_name}, not the "
                    f"pipeline's message {reader}")
        cls = message_factory.GetMessageClass(desc)
        return cls.FromString, converter(desc, self.spec["reader_type"])

    def decode(self, writers: list, offsets: list, heads: list | None, pre: list,
               values: list) -> tuple[list[tuple], list[str | None]]:
        """Per record: the reader's fields (a tuple) and why it is rejected (None for a good one),
        from the framing's columns as Python lists (``heads``: None when no record has a header)."""
        fields = self.spec["reader_type"]["fields"]
        empty = (None,) * len(fields)
        rows, errors = [], []
        append_row, append_error = rows.append, errors.append
        parsers = self._parsers
        last_key, last_parser = None, None
        message = self.spec["reader"]["message"]
        for i, value in enumerate(values):
            if pre[i] is not None:
                append_row(empty)
                append_error(pre[i])
                continue
            key, pos = writers[i], offsets[i]
            head = heads[i] if heads is not None else None
            where = value if head is None else head
            start = pos if head is None else 0
            if start >= len(where):
                append_row(empty)
                append_error(f"no message indexes: the value ends after schema id {key}" if head is None else
                             f"no message indexes: the schema id header of schema id {key} ends after its GUID")
                continue
            if where[start] == 0:  # the single-0 shortcut: [0], the file's first message
                indexes, start = (0,), start + 1
            else:
                try:
                    indexes, start = read_indexes(where, start)
                except IndexError_ as exc:
                    append_row(empty)
                    append_error(f"the message indexes after schema id {key} do not parse: {exc}")
                    continue
            if head is None:
                pos = start
            elif start != len(head):
                append_row(empty)
                append_error(f"the schema id header of schema id {key} goes on after its message indexes")
                continue
            if (key, indexes) == last_key:
                parser = last_parser
            else:
                parser = parsers.get((key, indexes)) or self.parser(key, indexes)
                last_key, last_parser = (key, indexes), parser
            if isinstance(parser, str):
                append_row(empty)
                append_error(parser)
                continue
            parse, convert = parser
            try:
                append_row(convert(parse(memoryview(value)[pos:] if pos else value)))  # no copy of the body
                append_error(None)
            except Exception as exc:  # noqa: BLE001 - DecodeError, and the runtime's others
                append_row(empty)
                detail = str(exc)
                if detail.startswith("Error parsing message"):  # upb's: "... with type 'X': <why>"
                    detail = detail.rpartition("': ")[2]
                append_error(f"Protobuf body does not parse as message {message} (schema id {key}): {detail}")
        return rows, errors

    def _arrays(self, columns: dict[str, Any], timestamp: Any) -> tuple[list[Any], Any]:
        """The reader's fields as Arrow arrays and the reasons, from the framing's Arrow columns."""
        import pyarrow as pa

        fields = self.spec["reader_type"]["fields"]
        head = columns[HEAD]
        rows, errors = self.decode(columns[WRITER].to_pylist(), columns[OFFSET].to_pylist(),
                                   head.to_pylist() if head.null_count < len(head) else None,
                                   columns[PRE_ERROR].to_pylist(), columns["value"].to_pylist())
        values = list(zip(*rows)) if rows else [()] * len(fields)
        arrays = [pa.array(col, type=arrow_type(f["type"], timestamp)) for col, f in zip(values, fields)]
        return arrays, pa.array(errors, type=pa.string())

    def struct(self, writer: pa.Array, offset: pa.Array, head: pa.Array, pre: pa.Array, value: pa.Array) -> pa.Array:
        """A scalar Arrow UDF's body: the framing's columns in, one struct column out (the reader's
        fields and ``_error``); only these five columns cross to Python and one comes back."""
        arrays, errors = self._arrays({WRITER: writer, OFFSET: offset, HEAD: head, PRE_ERROR: pre, "value": value},
                                      pa.timestamp("us", tz="UTC"))
        names = [f["name"] for f in self.spec["reader_type"]["fields"]]
        return pa.StructArray.from_arrays([*arrays, errors], names=[*names, ERROR])
