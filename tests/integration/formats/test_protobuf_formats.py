"""``confluent-protobuf`` in real (in-process) Spark 4.3.0: the framing's Spark expressions, the
Arrow UDF decoder in Spark's Python workers, and bytes written by confluent-kafka 2.16.1's own
``ProtobufSerializer`` (which registers the serialized form of its schema, a base64
``FileDescriptorProto``, and writes message indexes for a message that is not the file's first),
resolved by the plan task's code from a registry. No real schema registry can run here:
``tests/schema_registry_server.py`` stands in for one. The pipeline end to end, with the table of
rejections, is test_protobuf_pipeline.py's."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest
import yaml
from schema_registry_server import SchemaRegistryServer

from offsetbatch.config import load_config
from offsetbatch.formats import ERROR, FATAL, FORMATS, META
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan import schemas as batch_schemas
from offsetbatch_dev.sample.producer import make_event
from offsetbatch_dev.sample.protobuf_events import EVENT_V1, EVENT_V2, ProtobufEvents, message_class, referrer_of

pytestmark = pytest.mark.integration
TOPIC = "events"
START = datetime(2026, 10, 5, tzinfo=timezone.utc)
TWO = EVENT_V1.replace("message Event {", "message Header { string source = 1; }\n\nmessage Event {")


def _config(tmp_path, value: dict, key: dict | None = None):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "pb_p", "kafka": {"topics": [TOPIC]}, "value": value,
                                    "sink": {"path": str(tmp_path / "table")}, **({"key": key} if key else {})}))
    return load_config(path)


def _records(spark, values, keys=None):
    rows = [("t", 0, i, None, (keys or {}).get(i), list(h), v) for i, (v, h) in enumerate(values)]
    return spark.createDataFrame(rows, "kafka_topic STRING, kafka_partition INT, kafka_offset BIGINT, "
                                       "kafka_timestamp TIMESTAMP, kafka_key BINARY, "
                                       "kafka_headers ARRAY<STRUCT<key: STRING, value: BINARY>>, value BINARY")


def _client(registry):
    from offsetbatch.source.schema_registry import RegistrySettings, SchemaRegistry

    return SchemaRegistry(RegistrySettings.from_fields("sr", registry.url))


def _resolve(tmp_path, registry, **value):
    cfg = _config(tmp_path, {"format": "confluent-protobuf", "schema_registry": {"conn_id": "sr"}, **value})
    return batch_schemas.resolve(Pipeline(cfg), registry=lambda: _client(registry))


def _spec(schemas, required=(), schema_id="auto"):
    return SimpleNamespace(required=list(required), value_schemas=schemas.to_spec(), schema_id=schema_id)


def test_two_writer_versions_decode_into_the_reader_and_the_registry_is_asked_by_the_plan_only(spark, tmp_path):
    with SchemaRegistryServer() as registry:
        rng = random.Random(3)
        events = [make_event(rng, i, START, "a-") for i in range(10)]
        v1 = ProtobufEvents(registry.url, TOPIC, EVENT_V1, "prefix")
        v2 = ProtobufEvents(registry.url, TOPIC, EVENT_V2, "header")
        values = [v1(e) for e in events[:5]] + [v2(e) for e in events[5:]]
        schemas = _resolve(tmp_path, registry, required=["event_time"])
        registry.requests.clear()
        out = FORMATS["confluent-protobuf"].parse(_records(spark, values), _spec(schemas, ["event_time"]))
        assert out.columns == [*META, "value", "event_id", "kind", "user_id", "page", "event_time", "amount",
                               "referrer", ERROR]
        got = sorted(out.collect(), key=lambda r: r.kafka_offset)
        for i, (r, e) in enumerate(zip(got, events)):
            assert r[ERROR] is None, (i, r[ERROR])
            assert (r.event_id, r.kind, r.user_id, r.page, r.amount) == (e["event_id"], e["kind"], e["user_id"],
                                                                         e["page"], e.get("amount"))
            assert r.referrer == (referrer_of(e) if i >= 5 else None)
        assert registry.requests == [], "the Spark query asked the registry nothing"


def test_bytes_of_confluent_kafkas_own_protobuf_serializer(spark, tmp_path):
    """Its auto-registered (serialized) schema, its message indexes for the file's second message
    ([1]) and its GUID header form; a writer whose field changed type fails the batch (FATAL)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient, header_schema_id_serializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    with SchemaRegistryServer() as registry:
        client = SchemaRegistryClient({"url": registry.url})
        cls = message_class(TWO)
        prefix = ProtobufSerializer(cls, client, {"use.deprecated.format": False})
        header = ProtobufSerializer(cls, client, {"use.deprecated.format": False,
                                                  "schema.id.serializer": header_schema_id_serializer})
        m = cls(event_id="e1", kind=2, user_id=5, page="/p", amount=9.5)
        m.event_time.FromDatetime(START)
        headers: list = []
        a = prefix(m, SerializationContext(TOPIC, MessageField.VALUE))
        b = header(m, SerializationContext(TOPIC, MessageField.VALUE, headers))
        assert a[5:7] == b"\x02\x02" and headers[0][1][17:] == b"\x02\x02"  # message indexes [1], in full
        assert b == m.SerializeToString()  # the header form: indexes in the header, the value the bare message
        assert not registry._schemas[0].schema.lstrip().startswith("syntax")  # the serialized form
        changed = message_class(TWO.replace("int32 user_id", "string user_id"))
        c = ProtobufSerializer(changed, client, {"use.deprecated.format": False})(
            changed(event_id="e3", user_id="x"), SerializationContext(TOPIC, MessageField.VALUE))
        schemas = _resolve(tmp_path, registry, message="offsetbatch.sample.Event", schema_registry={
            "conn_id": "sr", "version": 1})
        assert schemas.writers["2"]["incompatible"].startswith("field(s) 'user_id' (string in the writer")
        out = FORMATS["confluent-protobuf"].parse(_records(spark, [(a, []), (b, headers), (c, [])]), _spec(schemas))
        got = sorted(out.collect(), key=lambda r: r.kafka_offset)
        for r in got[:2]:
            assert (r.event_id, r.kind, r.user_id, r.amount, r[ERROR]) == ("e1", "purchase", 5, 9.5, None)
            assert r.event_time.timestamp() == START.timestamp()  # Spark collects local time, naive
        assert got[2][ERROR].startswith(f"{FATAL}the reader schema (subject 'events-value' version 1, id 1, message "
                                        f"offsetbatch.sample.Event) cannot read writer schema id 2")


def test_keys_in_protobuf_parse_into_a_key_column(spark, tmp_path):
    from offsetbatch.job.transform import parse_records
    from offsetbatch.jobspec import JobSpec

    key_schema = 'syntax = "proto3";\npackage k;\nmessage Key { int32 user_id = 1; }\n'
    with SchemaRegistryServer() as registry:
        found = registry.register(f"{TOPIC}-key", key_schema, "PROTOBUF")
        cls = message_class(key_schema, "k.Key")
        key = b"\x00" + found.id.to_bytes(4, "big") + b"\x00" + cls(user_id=7).SerializeToString()
        cfg = _config(tmp_path, {"format": "json", "schema": "event_id STRING"},
                      key={"format": "confluent-protobuf", "schema_registry": {"conn_id": "sr"}})
        schemas = batch_schemas.resolve(Pipeline(cfg), "key", registry=lambda: _client(registry))
    spec = JobSpec(pipeline="p", batch_id=1, output_id=1, bootstrap="x:1", ranges=[], sink={"path": "/t"},
                   value_format="json", schema_ddl="event_id STRING",
                   key={"format": "confluent-protobuf", "schema_ddl": None, "required": [],
                        "value_schemas": schemas.to_spec(), "schema_id": "auto"})
    values = [(b'{"event_id": "a"}', [])] * 3
    got = sorted(parse_records(_records(spark, values, {0: key, 2: b"\x07junk"}), spec).collect(),
                 key=lambda r: r.kafka_offset)
    assert [(r.event_id, r.key and r.key.user_id, r[ERROR]) for r in got] == [
        ("a", 7, None), ("a", None, None),
        ("a", None, "key: not Confluent-framed: first byte 0x07, expected 0x00 (schema id) or 0x01 (GUID), and no "
                    "__key_schema_id header")]
