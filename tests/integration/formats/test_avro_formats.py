"""The Avro value formats in real (in-process) Spark 4.3.0 with spark-avro_2.13 4.2.0's ``from_avro``:
bytes written by confluent-kafka 2.16.1's own ``AvroSerializer`` (prefix and header forms, two
schema versions), schemas resolved by the plan task's code (``source.value_schemas``) from a
registry. No real schema registry can run here: ``tests/schema_registry_server.py`` stands in for
one, serving the documented Confluent REST routes the client and the serializer call.

Each bad record is rejected once with its reason, each good one decodes into the reader schema,
and a record whose fields are legitimately all null is kept (``from_avro`` gives a struct of nulls
for a failed decode too)."""

from __future__ import annotations

import json
import random
import uuid
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest
import yaml
from schema_registry_server import SchemaRegistryServer

from offsetbatch.config import load_config
from offsetbatch.formats import ERROR, FATAL, FORMATS, META
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan import schemas as batch_schemas
from offsetbatch_dev.sample.avro_events import EVENT_V1, EVENT_V2, MALFORMED, UNKNOWN_ID, AvroEvents, referrer_of
from offsetbatch_dev.sample.producer import make_event

pytestmark = pytest.mark.integration
TOPIC = "events"
START = datetime(2026, 10, 5, tzinfo=timezone.utc)


def _config(tmp_path, value: dict, key: dict | None = None):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "avro_p", "kafka": {"topics": [TOPIC]}, "value": value,
                                    "sink": {"path": str(tmp_path / "table")}, **({"key": key} if key else {})}))
    return load_config(path)


def _spec(schemas, required=(), schema_id="auto"):
    return SimpleNamespace(schema_ddl=None, required=list(required), value_schemas=schemas.to_spec(),
                           schema_id=schema_id)


def _records(spark, values):
    """``values``: (value bytes, headers) per record, at offsets 0, 1, ..."""
    rows = [("t", 0, i, None, None, [(k, v) for k, v in headers], v) for i, (v, headers) in enumerate(values)]
    return spark.createDataFrame(rows, "kafka_topic STRING, kafka_partition INT, kafka_offset BIGINT, "
                                       "kafka_timestamp TIMESTAMP, kafka_key BINARY, "
                                       "kafka_headers ARRAY<STRUCT<key: STRING, value: BINARY>>, value BINARY")


@pytest.fixture(scope="module")
def registry():
    with SchemaRegistryServer() as server:
        yield server


@pytest.fixture(scope="module")
def written(registry):
    """Events 0-3 as v1 (prefix), 4-7 as v2 (header), 8-9 as v2 (prefix), via the real serializer."""
    rng = random.Random(3)
    events = [make_event(rng, i, START, "a-") for i in range(10)]
    v1 = AvroEvents(registry.url, TOPIC, EVENT_V1, "prefix")
    v2_header = AvroEvents(registry.url, TOPIC, EVENT_V2, "header")
    v2_prefix = AvroEvents(registry.url, TOPIC, EVENT_V2, "prefix")
    encoded = [v1(e) for e in events[:4]] + [v2_header(e) for e in events[4:8]] + [v2_prefix(e) for e in events[8:]]
    return events, encoded


def test_confluent_avro_decodes_two_writer_versions_into_the_reader_and_rejects_each_bad_record(
        spark, tmp_path, registry, written):
    events, encoded = written
    registry.requests.clear()
    cfg = _config(tmp_path, {"format": "confluent-avro", "schema_registry": {"conn_id": "sr"}, "required": ["page"]})
    schemas = batch_schemas.resolve(Pipeline(cfg), registry=lambda: _client(registry))
    assert schemas.reader_from == {"subject": "events-value", "version": 2, "id": 2}  # latest, pinned
    assert sorted(schemas.writers) == ["1", "2"] and not any(w["incompatible"] for w in schemas.writers.values())
    v2_guid = uuid.UUID(schemas.writers["2"]["guid"])
    body_v2 = encoded[8][0][5:]
    bad = [
        (MALFORMED[0], [], "not Confluent-framed: first byte 0x7b, expected 0x00 (schema id) or 0x01 (GUID), and "
                           "no __value_schema_id header"),
        (MALFORMED[1], [], f"schema id {UNKNOWN_ID} is not among the writer schemas (the versions of subject(s) "
                           f"events-value at plan time)"),
        (MALFORMED[2], [], "Avro body does not decode with writer schema id 1"),
        (None, [], "null value"),
        (b"\x00\x00\x00", [], "not Confluent-framed: shorter than the 5-byte prefix"),
        (body_v2, [("__value_schema_id", b"\x01" + uuid.uuid4().bytes)], "is not among the writer schemas"),
        (body_v2, [("__value_schema_id", b"\x01\x02")], "the __value_schema_id header is not 0x01 + a 16-byte GUID"),
        (b"\x01" + v2_guid.bytes + body_v2, [], None),  # prefix v1: the GUID in the payload
    ]
    out = FORMATS["confluent-avro"].parse(_records(spark, encoded + [(v, h) for v, h, _ in bad]), _spec(schemas, ["page"]))
    assert out.columns == [*META, "value", "event_id", "kind", "user_id", "page", "event_time", "amount", "referrer",
                           ERROR]
    from pyspark.sql import functions as F

    got = {r.kafka_offset: r for r in out.withColumn("us", F.unix_micros("event_time")).collect()}
    for i, e in enumerate(events):  # every good record, field by field
        r = got[i]
        assert r[ERROR] is None, (i, r[ERROR])
        assert (r.event_id, r.kind, r.user_id, r.page, r.amount) == (e["event_id"], e["kind"], e["user_id"],
                                                                     e["page"], e.get("amount"))
        assert r.us == int(datetime.fromisoformat(e["event_time"]).timestamp() * 1_000_000)  # timestamp-micros
        # v1 records had no referrer: the reader's default (null); v2 records carry theirs
        expected_ref = referrer_of(e) if i >= 4 else None
        assert r.referrer == expected_ref, i
    for j, (_, _, reason) in enumerate(bad):
        error = got[len(events) + j][ERROR]
        assert (error is None) if reason is None else (reason in (error or "")), (j, error)
    assert got[len(events) + len(bad) - 1].event_id == events[8]["event_id"]
    # The registry was asked by the plan task's code only: the Spark query above asked nothing.
    assert all(path.startswith(("/subjects/events-value")) for _, path in registry.requests), registry.requests


def test_a_writer_the_reader_cannot_read_is_fatal_naming_the_field(spark, tmp_path, registry, written):
    """Reader pinned to version 1; a version 3 that changed ``user_id``'s type: its records fail the
    batch (the job raises on ``FATAL``), the other versions' records decode."""
    events, encoded = written
    incompatible = json.loads(EVENT_V2)
    incompatible["fields"][2] = {"name": "user_id", "type": "string"}
    v3 = AvroEvents(registry.url, TOPIC, json.dumps(incompatible), "prefix")
    value, _ = v3({**events[0], "user_id": "u-1"})
    cfg = _config(tmp_path, {"format": "confluent-avro", "schema_registry": {"conn_id": "sr", "version": 1}})
    schemas = batch_schemas.resolve(Pipeline(cfg), registry=lambda: _client(registry))
    assert schemas.reader_from["version"] == 1 and schemas.writers["3"]["incompatible"].startswith("field(s) 'user_id'")
    out = FORMATS["confluent-avro"].parse(_records(spark, [encoded[0], (value, [])]), _spec(schemas, schema_id="prefix"))
    assert out.columns[-1] == ERROR and "referrer" not in out.columns
    good, fatal = sorted(out.collect(), key=lambda r: r.kafka_offset)
    assert good[ERROR] is None and good.event_id == events[0]["event_id"]
    assert fatal[ERROR].startswith(FATAL) and "subject 'events-value' version 1, id 1" in fatal[ERROR]
    assert "schema id 3 (subject 'events-value' version 3)" in fatal[ERROR] and "'user_id'" in fatal[ERROR]


def test_plain_avro_keeps_a_record_whose_fields_are_all_null_and_rejects_garbage(spark, tmp_path):
    import io

    import fastavro

    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null", "string"]},
                                                          {"name": "b", "type": ["int", "null"]}]}
    (tmp_path / "r.avsc").write_text(json.dumps(schema))
    cfg = _config(tmp_path, {"format": "avro", "avro_schema": "r.avsc"})

    def enc(record):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
        return buf.getvalue()

    values = [enc({"a": None, "b": None}), enc({"a": "x", "b": 1}), b"\x06", b"\x02\x09"]
    schemas = batch_schemas.resolve(Pipeline(cfg))
    out = FORMATS["avro"].parse(_records(spark, [(v, []) for v in values]), _spec(schemas))
    got = sorted(out.collect(), key=lambda r: r.kafka_offset)
    assert [(r.a, r.b, r[ERROR]) for r in got] == [
        (None, None, None), ("x", 1, None),
        (None, None, "Avro body does not decode with writer schema id 0"),
        (None, None, "Avro body does not decode with writer schema id 0")]


def test_confluent_json_strips_the_prefix_and_parses_with_the_ddl(spark):
    values = [(b"\x00\x00\x00\x00\x07" + b'{"id": "a", "n": 1}', []), (b'{"id": "b"}', []),
              (b'{"id": "c", "n": 3}', [("__value_schema_id", b"\x01" + uuid.uuid4().bytes)]),
              (b"\x00\x00\x00\x00\x07{broken", [])]
    spec = SimpleNamespace(schema_ddl="id STRING, n INT", required=["id"], schema_id="auto")
    got = sorted(FORMATS["confluent-json"].parse(_records(spark, values), spec).collect(), key=lambda r: r.kafka_offset)
    assert [(r.id, r.n, r[ERROR]) for r in got] == [
        ("a", 1, None),
        (None, None, "not Confluent-framed: first byte 0x7b, expected 0x00 (schema id) or 0x01 (GUID), and no "
                     "__value_schema_id header"),
        ("c", 3, None), (None, None, "malformed JSON")]


def _client(registry):
    from offsetbatch.source.schema_registry import RegistrySettings, SchemaRegistry

    return SchemaRegistry(RegistrySettings.from_fields("sr", registry.url))


def test_keys_parse_with_their_own_format_into_a_key_column(spark, tmp_path, registry):
    """``key.format: confluent-avro`` with JSON values: the key's fields in ``key`` (NULL for a null
    key); a bad key rejects the record after the value's own reasons."""
    from confluent_kafka.schema_registry import SchemaRegistryClient, header_schema_id_serializer
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from offsetbatch.job.transform import parse_records
    from offsetbatch.jobspec import JobSpec

    key_schema = json.dumps({"type": "record", "name": "Key", "fields": [{"name": "user_id", "type": "int"}]})
    client = SchemaRegistryClient({"url": registry.url})
    headers: list = []
    prefix_key = AvroSerializer(client, key_schema)({"user_id": 7}, SerializationContext(TOPIC, MessageField.KEY))
    header_key = AvroSerializer(client, key_schema, conf={"schema.id.serializer": header_schema_id_serializer})(
        {"user_id": 8}, SerializationContext(TOPIC, MessageField.KEY, headers))
    assert headers[0][0] == "__key_schema_id"
    cfg = _config(tmp_path, {"format": "json", "schema": "event_id STRING", "required": ["event_id"]},
                  key={"format": "confluent-avro", "schema_registry": {"conn_id": "sr"}})
    schemas = batch_schemas.resolve(Pipeline(cfg), "key", registry=lambda: _client(registry))
    assert schemas.reader_from["subject"] == "events-key"
    spec = JobSpec(pipeline="p", batch_id=1, output_id=1, bootstrap="x:1", ranges=[], sink={"path": "/t"},
                   value_format="json", schema_ddl="event_id STRING", required=["event_id"],
                   key={"format": "confluent-avro", "schema_ddl": None, "required": [],
                        "value_schemas": schemas.to_spec(), "schema_id": "auto"})
    good = b'{"event_id": "a"}'
    rows = [(prefix_key, [], good), (header_key, headers, good), (None, [], good), (b"\x07junk", [], good),
            (prefix_key, [], b"{broken")]
    frame = spark.createDataFrame(
        [("t", 0, i, None, k, h, v) for i, (k, h, v) in enumerate(rows)],
        "kafka_topic STRING, kafka_partition INT, kafka_offset BIGINT, kafka_timestamp TIMESTAMP, kafka_key BINARY, "
        "kafka_headers ARRAY<STRUCT<key: STRING, value: BINARY>>, value BINARY")
    got = sorted(parse_records(frame, spec).collect(), key=lambda r: r.kafka_offset)
    assert [(r.event_id, r.key and r.key.user_id, r[ERROR]) for r in got] == [
        ("a", 7, None), ("a", 8, None), ("a", None, None),
        ("a", None, "key: not Confluent-framed: first byte 0x07, expected 0x00 (schema id) or 0x01 (GUID), and no "
                    "__key_schema_id header"),
        (None, 7, "malformed JSON")]



def _zz(n: int) -> bytes:
    """Avro's zigzag varint."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _str(b: bytes) -> bytes:
    return _zz(len(b)) + b


BAD = b"bad \xc3\x28 \xff"  # the hostile probe's bytes: not UTF-8


def test_a_string_that_is_not_utf8_is_rejected_naming_its_field(spark, tmp_path):
    """Issue 41, case 1: Spark's from_avro copies a string's bytes unchecked, so such a record landed
    and broke every Python reader of its Parquet file. Now it is rejected with the field named,
    wherever the string is (top level, array, map key, union member, nested record); the good
    records are untouched. Bodies are written byte by byte (no Avro writer writes such strings)."""
    schema = {"type": "record", "name": "E", "fields": [
        {"name": "id", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "m", "type": {"type": "map", "values": "long"}},
        {"name": "u", "type": ["null", "string", "int"]},
        {"name": "r", "type": {"type": "record", "name": "R", "fields": [{"name": "x", "type": "string"}]}}]}
    (tmp_path / "e.avsc").write_text(json.dumps(schema))
    cfg = _config(tmp_path, {"format": "avro", "avro_schema": "e.avsc"})

    def body(id_=b"a", tag=b"t", key=b"k", member=b"s", x=b"x") -> bytes:
        return (_str(id_) + _zz(1) + _str(tag) + _zz(0) + _zz(1) + _str(key) + _zz(7) + _zz(0)
                + _zz(1) + _str(member) + _str(x))

    values = [body(), body(id_=BAD), body(tag=BAD), body(key=BAD), body(member=BAD), body(x=BAD),
              body(id_="é ok".encode())]
    schemas = batch_schemas.resolve(Pipeline(cfg))
    got = sorted(FORMATS["avro"].parse(_records(spark, [(v, []) for v in values]), _spec(schemas)).collect(),
                 key=lambda r: r.kafka_offset)
    assert [r[ERROR] for r in got] == [
        None,
        "field id holds a string that is not valid UTF-8",
        "field tags holds a string that is not valid UTF-8",
        "field m holds a string that is not valid UTF-8",
        "field u holds a string that is not valid UTF-8",
        "field r holds a string that is not valid UTF-8",
        None]
    assert (got[0].id, list(got[0].tags), dict(got[0].m), got[0].u.member0, got[0].r.x) == ("a", ["t"], {"k": 7}, "s", "x")
    assert got[6].id == "é ok"


def test_debezium_avro_envelopes_unwrap_like_the_json_ones(spark, tmp_path, registry):
    """``value.format: debezium-avro`` (issue 44): envelopes written by confluent-kafka's own
    ``AvroSerializer`` with an envelope schema shaped like Debezium's PostgreSQL connector's
    (``before``/``after`` optional records, ``op``, ``ts_ms``, ``source`` with ``lsn``), resolved
    from the registry as the plan does; rows, deletes, the tombstone skipped, broken events rejected."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from offsetbatch.formats import SKIP
    from offsetbatch.job.transform import parse_records
    from offsetbatch.jobspec import JobSpec

    topic = "shop.public.accounts"
    row = {"type": "record", "name": "Value", "namespace": "shop.public.accounts",
           "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": ["null", "string"], "default": None}]}
    envelope = {"type": "record", "name": "Envelope", "namespace": "shop.public.accounts", "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", "shop.public.accounts.Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                    "fields": [{"name": "db", "type": "string"},
                                               {"name": "lsn", "type": ["null", "long"], "default": None}]}},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None}]}
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(envelope))
    ctx = SerializationContext(topic, MessageField.VALUE)

    def event(op, before=None, after=None, lsn=None):
        return serialize({"before": before, "after": after, "op": op, "ts_ms": 1700000000000,
                          "source": {"db": "shop", "lsn": lsn}}, ctx)

    values = [(event("c", after={"id": 1, "name": "a"}, lsn=100), []),
              (event("u", before={"id": 1, "name": "a"}, after={"id": 1, "name": "b\xe9"}, lsn=200), []),
              (event("d", before={"id": 1, "name": None}, lsn=300), []),
              (None, []),
              (event("d", lsn=310), []),
              (event("u", after={"id": 2, "name": "c"}), [])]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "cdc_avro", "kafka": {"topics": [topic]}, "sink": {"path": str(tmp_path / "t")},
                                    "value": {"format": "debezium-avro", "schema_registry": {"conn_id": "sr"},
                                              "required": ["id"], "version": "source.lsn"}}))
    cfg = load_config(path)
    schemas = batch_schemas.resolve(Pipeline(cfg), registry=lambda: _client(registry))
    spec = JobSpec(pipeline="p", batch_id=1, output_id=1, bootstrap="x:1", ranges=[], sink={"path": "/t"},
                   value_format="debezium-avro", required=["id"], value_schemas=schemas.to_spec(), schema_id="prefix",
                   value_options=cfg.value.options)
    parsed = parse_records(_records(spark, values), spec)
    assert SKIP in parsed.columns and FORMATS["debezium-avro"].skips  # what the job counts and drops by
    got = sorted(parsed.collect(), key=lambda r: r.kafka_offset)
    assert [(r.id, r.name, r.cdc_op, r.cdc_deleted, r.cdc_version, r[ERROR], r[SKIP]) for r in got] == [
        (1, "a", "c", False, 100, None, None),
        (1, "b\xe9", "u", False, 200, None, None),
        (1, None, "d", True, 300, None, None),
        (None, None, None, False, None, None, "tombstone (Debezium writes one after each delete)"),
        (None, None, "d", True, 310, "a delete (op 'd') without 'before': the deleted key is unknown (give the "
                                     "source table a replica identity that includes the key)", None),
        (2, "c", "u", False, None, "no version at source.lsn", None),
    ]
