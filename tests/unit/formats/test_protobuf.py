"""``confluent-protobuf`` without Spark: Confluent's message indexes (checked against confluent-kafka
2.16.1's own encoder), the descriptor -> Spark type mapping, the compiled converter, the Arrow
decoder's rejections, and the plan task's resolution of reader, writers and references from a
registry (``tests/schema_registry_server.py`` stands in for one: no real registry can run here).
The Spark side (the Arrow UDF, the framing, sinks) is tests/integration/formats/test_protobuf_*.py's."""

from __future__ import annotations

import base64
import io
import struct
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from harness import load_value_config
from schema_registry_server import SchemaRegistryServer

from offsetbatch.errors import ConfigError, SchemaRegistryUnavailableError
from offsetbatch.formats import protobuf_decode as pbd
from offsetbatch.formats import protobuf_schemas
from offsetbatch.formats.protobuf_schemas import ProtobufSchemaError, compile_files
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan import schemas as batch_schemas
from offsetbatch.source.schema_registry import RegistrySettings, SchemaRegistry
from offsetbatch_dev.sample.protobuf_events import EVENT_V1, EVENT_V2

COMMON = """syntax = "proto3";
package shop.common;
message Money { string currency = 1; int64 units = 2; }
"""
# Every shape the mapping has a rule for; Money comes from another subject (a reference)
SHAPES = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "shop/common.proto";

message Order {
  enum Status { NEW = 0; PAID = 1; }
  message Line { string sku = 1; uint32 qty = 2; }
  string id = 1;
  int32 i32 = 2;
  sint64 s64 = 3;
  uint32 u32 = 4;
  uint64 u64 = 5;
  fixed64 f64 = 6;
  float f = 7;
  double d = 8;
  bool b = 9;
  bytes raw = 10;
  Status status = 11;
  Line first = 12;
  repeated Line lines = 13;
  repeated string tags = 14;
  map<string, int64> counts = 15;
  map<string, Line> by_sku = 16;
  google.protobuf.Timestamp at = 17;
  google.protobuf.StringValue note = 18;
  oneof payment { string card = 19; shop.common.Money cash = 20; }
  optional int32 maybe = 21;
  repeated Status history = 22;
}
message Other { string x = 1; message Inner { int32 y = 1; } }
"""


# ---- message indexes --------------------------------------------------------------------------

def _confluent_indexes(indexes: list[int]) -> bytes:
    """What confluent-kafka 2.16.1's ProtobufSerializer writes (its own encoder, not ours)."""
    from confluent_kafka.schema_registry._sync.protobuf import ProtobufSerializer

    buf = io.BytesIO()
    ProtobufSerializer._encode_varints(buf, indexes)
    return buf.getvalue()


@pytest.mark.parametrize("indexes", [[0], [1], [0, 2], [3, 1, 4], [64], [300, 0]])
def test_message_indexes_read_what_confluents_serializer_writes(indexes):
    written = _confluent_indexes(indexes)
    assert pbd.write_indexes(indexes) == written
    assert pbd.read_indexes(written + b"\x0a\x01x") == (tuple(indexes), len(written))
    assert pbd.read_indexes(b"\xff\xff" + written, 2) == (tuple(indexes), 2 + len(written))


def test_the_single_zero_byte_is_the_first_message():
    assert _confluent_indexes([0]) == b"\x00"
    assert pbd.read_indexes(b"\x00\x0a") == ((0,), 1)


@pytest.mark.parametrize("data, reason", [
    (b"\x01", "a negative count of message indexes (-1)"),
    (b"\x02\x01", "a negative message index (-1)"),
    (b"\x04\x02", "2 message indexes announced, but only 1 byte(s) follow"),
    (b"\x80", "the message indexes end before their last varint"),
    (b"", "the message indexes end before their last varint"),
    (b"\x02" + b"\xff" * 11, "a message index varint longer than 10 bytes"),
])
def test_message_indexes_that_do_not_parse_say_why(data, reason):
    with pytest.raises(pbd.IndexError_, match=reason.replace("(", r"\(").replace(")", r"\)")):
        pbd.read_indexes(data)


# ---- compiling and the Spark shape ------------------------------------------------------------

@pytest.fixture(scope="module")
def shapes():
    fds = compile_files("main.proto", {"main.proto": SHAPES, "shop/common.proto": COMMON}, "test")
    return pbd.pool_of(fds)


def test_protoc_compiles_a_schema_with_its_reference_and_the_well_known_types(shapes):
    names = [f.name for f in __import__("google.protobuf.descriptor_pb2", fromlist=["x"]).FileDescriptorSet
             .FromString(compile_files("main.proto", {"main.proto": SHAPES, "shop/common.proto": COMMON}, "t")).file]
    assert names[-1] == "main.proto" and {"shop/common.proto", "google/protobuf/timestamp.proto",
                                          "google/protobuf/wrappers.proto"} <= set(names)
    file_desc = shapes.FindFileByName("main.proto")
    assert pbd.message_at(file_desc, (0,)).full_name == "shop.Order"
    assert pbd.message_at(file_desc, (0, 0)).full_name == "shop.Order.Line"
    assert pbd.message_at(file_desc, (1, 0)).full_name == "shop.Other.Inner"
    assert pbd.message_at(file_desc, (2,)) is None and pbd.message_at(file_desc, (0, 5)) is None
    # nested messages are counted as confluent-kafka's serializer counts them (map entries included)
    from confluent_kafka.schema_registry.common.protobuf import _create_index_array

    for name in ("shop.Order", "shop.Order.Line", "shop.Other.Inner"):
        desc = shapes.FindMessageTypeByName(name)
        assert list(pbd.index_of(desc)) == _create_index_array(desc), name
        assert pbd.message_at(file_desc, pbd.index_of(desc)) is desc


def test_a_schema_protoc_refuses_fails_with_protocs_message():
    with pytest.raises(ProtobufSchemaError, match=r"subject 's' version 3 does not compile \(protoc: .*main.proto:2:.*"):
        compile_files("main.proto", {"main.proto": 'syntax = "proto3";\nmessage A { strin x = 1; }\n'},
                      "subject 's' version 3")
    with pytest.raises(ProtobufSchemaError, match=r"does not compile \(protoc: .*missing.proto"):
        compile_files("main.proto", {"main.proto": 'syntax = "proto3";\nimport "missing.proto";\n'}, "x")


def test_the_serialized_form_of_a_schema_is_taken_as_it_is(shapes):
    """confluent-kafka's Python serializer registers a base64 FileDescriptorProto, not .proto text."""
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.FileDescriptorProto()
    shapes.FindFileByName("main.proto").CopyToProto(proto)
    common = descriptor_pb2.FileDescriptorProto()
    shapes.FindFileByName("shop/common.proto").CopyToProto(common)
    b64 = base64.b64encode(proto.SerializeToString()).decode()
    assert protobuf_schemas.as_descriptor(b64) is not None and protobuf_schemas.as_descriptor(SHAPES) is None
    fds = compile_files("m.proto", {"m.proto": b64, "shop/common.proto": base64.b64encode(
        common.SerializeToString()).decode()}, "t")
    assert pbd.pool_of(fds).FindMessageTypeByName("shop.Order").fields_by_name["cash"].message_type.full_name == \
        "shop.common.Money"
    # a text schema importing a serialized one
    fds = compile_files("m.proto", {"m.proto": SHAPES, "shop/common.proto": base64.b64encode(
        common.SerializeToString()).decode()}, "t")
    assert pbd.pool_of(fds).FindMessageTypeByName("shop.Order")


def test_descriptor_to_spark_type(shapes):
    from pyspark.sql.types import StructType

    order = StructType.fromJson(pbd.spark_type(shapes.FindMessageTypeByName("shop.Order")))
    assert order.simpleString() == (
        "struct<id:string,i32:int,s64:bigint,u32:bigint,u64:decimal(20,0),f64:decimal(20,0),f:float,d:double,"
        "b:boolean,raw:binary,status:string,first:struct<sku:string,qty:bigint>,"
        "lines:array<struct<sku:string,qty:bigint>>,tags:array<string>,counts:map<string,bigint>,"
        "by_sku:map<string,struct<sku:string,qty:bigint>>,at:timestamp,note:string,card:string,"
        "cash:struct<currency:string,units:bigint>,maybe:int,history:array<string>>")
    assert all(f.nullable for f in order.fields)


def test_a_recursive_message_has_no_spark_type():
    fds = compile_files("r.proto", {"r.proto": 'syntax = "proto3";\npackage t;\nmessage Node { string v = 1; '
                                               'repeated Node children = 2; }\n'}, "t")
    with pytest.raises(pbd.RecursiveMessage, match=r"message t.Node contains itself \(t.Node -> t.Node\)"):
        pbd.spark_type(pbd.pool_of(fds).FindMessageTypeByName("t.Node"))


def _order(shapes, **fields):
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(shapes.FindMessageTypeByName("shop.Order"))(**fields)


def test_the_converter_gives_the_reader_shape(shapes):
    desc = shapes.FindMessageTypeByName("shop.Order")
    convert = pbd.converter(desc, pbd.spark_type(desc))
    m = _order(shapes, id="o1", i32=-5, s64=-(2**40), u32=2**32 - 1, u64=2**64 - 1, f=1.5, d=2.25, b=True,
               raw=b"\x00\xff", status=1, first={"sku": "a", "qty": 2}, lines=[{"sku": "b", "qty": 1}],
               tags=["x", "y"], counts={"k": 7}, by_sku={"s": {"sku": "s", "qty": 3}}, card="4242",
               note={"value": "hi"}, history=[0, 1, 9])
    m.at.FromDatetime(datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc))
    got = dict(zip([f.name for f in desc.fields], convert(m)))
    assert got == {
        "id": "o1", "i32": -5, "s64": -(2**40), "u32": 2**32 - 1, "u64": 2**64 - 1, "f64": 0, "f": 1.5, "d": 2.25,
        "b": True, "raw": b"\x00\xff", "status": "PAID", "first": ("a", 2), "lines": [("b", 1)], "tags": ["x", "y"],
        "counts": [("k", 7)], "by_sku": [("s", ("s", 3))],
        "at": int(datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc).timestamp() * 1_000_000),
        "note": "hi", "card": "4242", "cash": None, "maybe": None, "history": ["NEW", "PAID", "9"]}
    unset = dict(zip([f.name for f in desc.fields], convert(_order(shapes, cash={"currency": "EUR", "units": 3}))))
    # proto3 scalars without presence are their defaults; messages, optional and oneof members NULL when unset
    assert (unset["id"], unset["i32"], unset["first"], unset["at"], unset["note"], unset["maybe"]) == ("", 0, None,
                                                                                                       None, None, None)
    assert (unset["card"], unset["cash"], unset["lines"], unset["counts"]) == (None, ("EUR", 3), [], [])


def _two_versions():
    v1 = pbd.pool_of(compile_files("e.proto", {"e.proto": EVENT_V1}, "v1"))
    v2 = pbd.pool_of(compile_files("e.proto", {"e.proto": EVENT_V2}, "v2"))
    return v1.FindMessageTypeByName("offsetbatch.sample.Event"), v2.FindMessageTypeByName("offsetbatch.sample.Event")


def test_a_writer_lands_in_the_readers_shape_by_field_name():
    from google.protobuf import message_factory

    v1, v2 = _two_versions()
    old = message_factory.GetMessageClass(v1)(event_id="a", kind=2, user_id=3, page="/", amount=1.5)
    assert pbd.converter(v1, pbd.spark_type(v2))(old) == ("a", "purchase", 3, "/", None, 1.5, None)  # no referrer: NULL
    new = message_factory.GetMessageClass(v2)(event_id="b", kind=1, user_id=4, page="/x", referrer="r")
    assert pbd.converter(v2, pbd.spark_type(v1))(new) == ("b", "click", 4, "/x", None, None)  # dropped
    assert pbd.incompatibility(v1, v2) == [] and pbd.incompatibility(v2, v1) == []
    v3 = pbd.pool_of(compile_files("e.proto", {"e.proto": EVENT_V2.replace("int32 user_id", "string user_id")}, "v3"))
    assert pbd.incompatibility(v3.FindMessageTypeByName("offsetbatch.sample.Event"), v2) == [
        "'user_id' (string in the writer, integer in the reader)"]


def test_a_field_added_to_a_nested_message_at_any_depth_is_compatible(shapes):
    """A field added to ``Line`` (inside a struct, an array and a map's values): the older writer's
    lines land with it NULL; a changed type deep inside is named by its path."""
    from google.protobuf import message_factory

    added = SHAPES.replace("uint32 qty = 2; }", "uint32 qty = 2; string note = 3; }")
    newer = pbd.pool_of(compile_files("main.proto", {"main.proto": added, "shop/common.proto": COMMON}, "t"))
    old, new = shapes.FindMessageTypeByName("shop.Order"), newer.FindMessageTypeByName("shop.Order")
    assert pbd.incompatibility(old, new) == [] and pbd.incompatibility(new, old) == []
    m = message_factory.GetMessageClass(old)(first={"sku": "a", "qty": 1}, lines=[{"sku": "b", "qty": 2}],
                                             by_sku={"c": {"sku": "c", "qty": 3}})
    got = dict(zip([f.name for f in new.fields], pbd.converter(old, pbd.spark_type(new))(m)))
    assert (got["first"], got["lines"], got["by_sku"]) == (("a", 1, None), [("b", 2, None)], [("c", ("c", 3, None))])
    changed = SHAPES.replace("uint32 qty = 2; }", "string qty = 2; }")
    bad = pbd.pool_of(compile_files("main.proto", {"main.proto": changed, "shop/common.proto": COMMON}, "t"))
    assert pbd.incompatibility(bad.FindMessageTypeByName("shop.Order"), old) == [
        "'first.qty' (string in the writer, long in the reader)",
        "'lines[].qty' (string in the writer, long in the reader)",
        "'by_sku{}.qty' (string in the writer, long in the reader)"]


# ---- the Arrow decoder ------------------------------------------------------------------------

def _decoder_spec(reader_desc, writers: dict[int, tuple[str, bytes]]) -> dict:
    return {"reader": {"message": reader_desc.full_name}, "reader_type": pbd.spark_type(reader_desc),
            "writers": {str(k): {"file": f, "descriptor_set": base64.b64encode(fds).decode()}
                        for k, (f, fds) in writers.items()}}


def test_the_arrow_udf_turns_values_into_a_struct_column_with_the_reasons():
    from google.protobuf import message_factory

    fds = compile_files("e.proto", {"e.proto": EVENT_V2 + "message Other { string x = 1; }\n"}, "v2")
    desc = pbd.pool_of(fds).FindMessageTypeByName("offsetbatch.sample.Event")
    msg = message_factory.GetMessageClass(desc)(event_id="a", kind=1, user_id=7, page="/", referrer="r")
    msg.event_time.FromDatetime(datetime(2026, 1, 1, tzinfo=timezone.utc))
    body = msg.SerializeToString()
    prefix = b"\x00" + struct.pack(">I", 5)
    rows = [  # (value, offset, writer, error before the body, header tail)
        (prefix + b"\x00" + body, 5, 5, None),
        (prefix + b"\x02\x00" + body, 5, 5, None),  # [0] written in full
        (prefix + b"\x02\x02" + body, 5, 5, None),  # [1]: Other, not the pipeline's message
        (prefix + b"\x02\x04" + body, 5, 5, None),  # [2]: no such message
        (prefix + b"\x01" + body, 5, 5, None),  # a negative count
        (prefix + b"\x00" + body[:-1], 5, 5, None),  # truncated: the last string is one byte short
        (prefix, 5, 5, None),  # nothing after the schema id
        (None, 0, None, "null value"),
        (body, 0, 5, None, b"\x00"),  # the header form: indexes in the header, the value the bare message
        (body, 0, 5, None, b""),  # a header without indexes
        (body, 0, 5, None, b"\x00\x00"),  # a header with more after its indexes
    ]
    rows = [r if len(r) == 5 else (*r, None) for r in rows]
    out = pbd.Decoder(_decoder_spec(desc, {5: ("e.proto", fds)})).struct(
        pa.array([r[2] for r in rows], pa.int64()), pa.array([r[1] for r in rows], pa.int32()),
        pa.array([r[4] for r in rows], pa.binary()), pa.array([r[3] for r in rows], pa.string()),
        pa.array([r[0] for r in rows], pa.binary()))
    assert [f.name for f in out.type] == ["event_id", "kind", "user_id", "page", "event_time", "amount", "referrer",
                                          "_error"]
    assert out.type.field("event_time").type == pa.timestamp("us", tz="UTC")
    got = out.to_pylist()
    for i in (0, 1, 8):
        assert (got[i]["event_id"], got[i]["kind"], got[i]["user_id"], got[i]["referrer"], got[i]["_error"]) == (
            "a", "click", 7, "r", None), i
        assert got[i]["event_time"] == datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert [r["_error"] for r in got[2:8]] == [
        "message indexes [1] of schema id 5 name message offsetbatch.sample.Other, not the pipeline's message "
        "offsetbatch.sample.Event",
        "message indexes [2] name no message of schema id 5 (its file has 2 top-level message(s))",
        "the message indexes after schema id 5 do not parse: a negative count of message indexes (-1)",
        "Protobuf body does not parse as message offsetbatch.sample.Event (schema id 5): Wire format was corrupt",
        "no message indexes: the value ends after schema id 5",
        "null value"]
    assert [r["_error"] for r in got[9:]] == [
        "no message indexes: the schema id header of schema id 5 ends after its GUID",
        "the schema id header of schema id 5 goes on after its message indexes"]
    assert all(got[i]["event_id"] is None for i in range(2, 8))


# ---- the plan task ----------------------------------------------------------------------------

_load = load_value_config


@pytest.mark.parametrize("value, topics, message", [
    ({"format": "confluent-protobuf"}, ["events"], "format 'confluent-protobuf' needs 'schema_registry'"),
    ({"format": "confluent-protobuf", "schema_registry": {}, "schema": "id STRING"}, ["events"],
     "format 'confluent-protobuf' takes no 'schema'"),
    ({"format": "confluent-protobuf", "schema_registry": {}}, ["a", "b"], "value.schema_registry.subject is needed"),
    ({"format": "json", "schema": "id STRING", "message": "x.Y"}, ["a"], "Extra inputs are not permitted"),
])
def test_settings_that_cannot_work_fail_at_config_load(tmp_path, value, topics, message):
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, value, topics)


def _client(registry):
    return SchemaRegistry(RegistrySettings.from_fields("sr", registry.url))


def _resolve(tmp_path, registry, message=None, **registry_settings):
    cfg = _load(tmp_path, {"format": "confluent-protobuf", "schema_registry": {"conn_id": "sr", **registry_settings},
                           **({"message": message} if message else {})})
    return batch_schemas.resolve(Pipeline(cfg), registry=lambda: _client(registry))


def test_reader_writers_and_references_resolve_into_the_spec(tmp_path):
    with SchemaRegistryServer() as registry:
        registry.register("shop-common", COMMON, "PROTOBUF")
        refs = [{"name": "shop/common.proto", "subject": "shop-common", "version": 1}]
        registry.register("events-value", SHAPES, "PROTOBUF", refs)
        registry.register("events-value", SHAPES.replace("optional int32 maybe = 21;",
                                                         "optional int32 maybe = 21;\n  string added = 23;"),
                          "PROTOBUF", refs)
        schemas = _resolve(tmp_path, registry, version=1)
        assert {k: schemas.reader[k] for k in ("subject", "version", "id", "message")} == {
            "subject": "events-value", "version": 1, "id": 2, "message": "shop.Order"}
        assert sorted(schemas.writers) == ["2", "3"] and not any(w["incompatible"] for w in schemas.writers.values())
        assert [f["name"] for f in schemas.reader_type["fields"]][-3:] == ["cash", "maybe", "history"]
        assert schemas.recorded()["reader"]["message"] == "shop.Order"
        latest = _resolve(tmp_path, registry, message="shop.Other")
        assert latest.reader["version"] == 2 and latest.reader_type["fields"][0]["name"] == "x"
        with pytest.raises(ConfigError, match=r"pipeline p: the value reader schema, subject 'events-value' version 2 "
                                              r"has no message 'shop.Nope' \(its messages: shop.Order, shop.Other\)"):
            _resolve(tmp_path, registry, message="shop.Nope")


def test_a_registry_schema_protoc_refuses_fails_the_plan_naming_pipeline_subject_and_version(tmp_path):
    with SchemaRegistryServer() as registry:
        registry.register("events-value", 'syntax = "proto3";\nmessage E { strin x = 1; }\n', "PROTOBUF")
        with pytest.raises(ProtobufSchemaError, match=r"pipeline p: the Protobuf schema of subject 'events-value' "
                                                      r"version 1 \(id 1\) does not compile \(protoc: .*strin"):
            _resolve(tmp_path, registry)
        registry.register("other-value", '{"type": "record", "name": "R", "fields": []}')
        with pytest.raises(ProtobufSchemaError, match=r"subject 'other-value' version 1 is a AVRO schema; format "
                                                      r"'confluent-protobuf' needs a Protobuf one"):
            _resolve(tmp_path, registry, subject="other-value")


def test_an_incompatible_writer_is_recorded_and_a_down_registry_fails_before_planning(tmp_path):
    with SchemaRegistryServer() as registry:
        registry.register("events-value", EVENT_V1, "PROTOBUF")
        registry.register("events-value", EVENT_V1.replace("int32 user_id", "string user_id"), "PROTOBUF")
        schemas = _resolve(tmp_path, registry, version=1)
        assert schemas.writers["2"]["incompatible"] == "field(s) 'user_id' (string in the writer, integer in the reader)"
        assert schemas.writers["1"]["incompatible"] is None
        url = registry.url
    with pytest.raises(SchemaRegistryUnavailableError, match=rf"Schema registry {url} .*did not answer .*needed by "
                                                             r"pipeline p"):
        _resolve(tmp_path, registry)


def test_a_replay_keeps_the_writers_its_batch_was_planned_with(tmp_path):
    """A writer version soft-deleted since the batch was planned is still among a replay's writers."""
    with SchemaRegistryServer() as registry:
        registry.register("events-value", EVENT_V1, "PROTOBUF")
        planned = _resolve(tmp_path, registry)
        registry.register("events-value", EVENT_V2, "PROTOBUF")
        registry.soft_delete("events-value", 1)
        today = _resolve(tmp_path, registry)
        assert sorted(today.writers) == ["2"]
        kept = protobuf_schemas.with_planned(today, planned.to_spec())
        assert sorted(kept.writers) == ["1", "2"] and kept.writers["1"]["incompatible"] is None
        assert kept.writers["1"]["descriptor_set"] == planned.writers["1"]["descriptor_set"]
        refreshed = protobuf_schemas.refreshed(
            _load(tmp_path, {"format": "confluent-protobuf", "schema_registry": {"conn_id": "sr"}}).value, today,
            __import__("offsetbatch.formats", fromlist=["SchemaContext"]).SchemaContext(
                "p", topics=("events",), registry=lambda: _client(registry)))
        assert refreshed.writers == today.writers
