"""A confluent-protobuf pipeline through real Airflow runs (``dags test``), spark-submit and the real
broker: two writer schema versions in one batch (v1 in the prefix form, v2 in the header form),
decoded into the reader (``latest``, v2: v1's records have no ``referrer``), and the **rejection
table**: each malformed kind written to a known offset lands in the rejected output with exactly its
reason, topic, partition and offset (read back with pyarrow, not our reader). Every valid record is in
the table once. Then the plan-time failures: a registry schema protoc cannot compile fails the plan
naming the pipeline, subject and version, and a registry that is down fails it, both before the ledger
is touched. No real schema registry can run here: ``tests/schema_registry_server.py`` stands in."""

from __future__ import annotations

import struct
import uuid
from datetime import datetime, timedelta, timezone

import pyarrow.dataset as pads
import pytest
from harness import avro_pipeline, produce_avro

from offsetbatch.formats.protobuf_decode import write_indexes
from offsetbatch_dev.sample.protobuf_events import EVENT_V1, EVENT_V2, MALFORMED, message_class, referrer_of
from schema_registry_server import SchemaRegistryServer

pytestmark = pytest.mark.integration
BASE = datetime(2026, 11, 5, tzinfo=timezone.utc)
H = timedelta(hours=1)


def _prefix(schema_id: int) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id)


def _does_not_parse(data: bytes) -> str:
    """The reason for a v1 body that does not parse, in the protobuf runtime's own words."""
    try:
        message_class(EVENT_V1).FromString(data)
    except Exception as exc:  # noqa: BLE001 - DecodeError
        return (f"Protobuf body does not parse as message offsetbatch.sample.Event (schema id 1): "
                f"{str(exc).rpartition(chr(39) + ': ')[2]}")
    raise AssertionError("it parses")


def _rejection_table(topic: str) -> list[tuple[bytes | None, list, str]]:
    """(value, headers, the exact reason) per malformed kind; the good body is a v1 Event."""
    cls = message_class(EVENT_V1)
    good = cls(event_id="bad-1", kind=1, user_id=1, page="/")
    good.event_time.FromDatetime(BASE)
    body = good.SerializeToString()
    no_time = cls(event_id="bad-2", kind=1, user_id=1, page="/").SerializeToString()
    not_utf8 = b"\x0a\x02\xc3\x28" + body  # field 1 (event_id) holding bytes that are not UTF-8
    truncated = body[:-1]
    unknown_guid = uuid.uuid4()

    writers = f"the versions of subject(s) {topic}-value at plan time"
    return [
        (b"{not protobuf", [], "not Confluent-framed: first byte 0x7b, expected 0x00 (schema id) or 0x01 (GUID), and "
                               "no __value_schema_id header"),
        (b"\x00\x00\x00", [], "not Confluent-framed: shorter than the 5-byte prefix"),
        (_prefix(999_999) + b"\x00" + body, [], f"schema id 999999 is not among the writer schemas ({writers})"),
        (body, [("__value_schema_id", b"\x01" + unknown_guid.bytes + b"\x00")],
         f"schema GUID {unknown_guid.hex} is not among the writer schemas ({writers})"),
        (_prefix(1) + write_indexes([3]) + body, [],
         "message indexes [3] name no message of schema id 1 (its file has 1 top-level message(s))"),
        (_prefix(1) + write_indexes([0, 1]) + body, [],
         "message indexes [0, 1] name no message of schema id 1 (its file has 1 top-level message(s))"),
        (_prefix(1) + b"\x02\x01" + body, [],
         "the message indexes after schema id 1 do not parse: a negative message index (-1)"),
        (_prefix(1), [], "no message indexes: the value ends after schema id 1"),
        (_prefix(1) + b"\x00" + truncated, [], _does_not_parse(truncated)),
        (_prefix(1) + b"\x00" + not_utf8, [], _does_not_parse(not_utf8)),
        (_prefix(1) + b"\x00" + no_time, [], "missing required field(s): event_time"),
        (None, [], "null value"),
    ]


def _produce_table(p, table) -> dict[tuple[int, int], str]:
    """Each malformed value to partition 0; the reason expected at its (partition, offset)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=p.bootstrap, acks="all")
    ts = int((BASE + timedelta(minutes=30)).timestamp() * 1000)
    sent = [(producer.send(p.topic, key=b"k", value=v, headers=h, partition=0, timestamp_ms=ts), reason)
            for v, h, reason in table]
    producer.flush()
    expected = {}
    for future, reason in sent:
        meta = future.get(timeout=30)
        expected[(0, meta.offset)] = reason
        p.produced[(0, meta.offset)] = None
    producer.close()
    return expected


def test_protobuf_batch_lands_once_and_each_bad_record_is_rejected_with_its_reason(make_pipeline):
    registry = SchemaRegistryServer()
    try:
        p = avro_pipeline(make_pipeline, registry.url, version="latest", kind="protobuf")
        v1 = produce_avro(p, registry.url, EVENT_V1, "prefix", 300, seed=1, start=BASE, kind="protobuf")
        v2 = produce_avro(p, registry.url, EVENT_V2, "header", 300, seed=2, start=BASE, kind="protobuf")
        assert registry._subjects[f"{p.topic}-value"] == [1, 2]
        expected_rejections = _produce_table(p, _rejection_table(p.topic))

        done = p.run(BASE)
        assert done.ok, done.output[-4000:]
        report = p.check()
        assert report.ok and report.rejected_expected > len(expected_rejections), report.summary()

        table = pads.dataset(p.table, format="parquet", partitioning="hive", ignore_prefixes=["_", "."]).to_table()
        assert table.num_rows == len(p.expected_ids()), "every valid record once"
        rows = {row["event_id"]: row for row in table.to_pylist()}
        assert set(rows) == p.expected_ids()
        produced = {**v1, **v2}
        for event_id, row in rows.items():
            e = produced[event_id]
            assert (row["kind"], row["user_id"], row["page"], row["amount"]) == (
                e["kind"], e["user_id"], e["page"], e.get("amount")), event_id
            assert row["event_time"] == datetime.fromisoformat(e["event_time"]), event_id
            # the reader is v2: v1's records had no referrer (NULL), v2's carry theirs
            assert row["referrer"] == (referrer_of(e) if event_id in v2 else None), event_id

        rejected = pads.dataset(f"{p.table}/_rejected", format="parquet", partitioning="hive").to_table().to_pylist()
        by_offset = {(r["kafka_partition"], r["kafka_offset"]): r for r in rejected}
        assert len(by_offset) == len(rejected), "each rejected record once"
        for where, reason in expected_rejections.items():
            assert by_offset[where]["error"] == reason, (where, by_offset[where]["error"])
            assert by_offset[where]["kafka_topic"] == p.topic
        others = {r["error"] for w, r in by_offset.items() if w not in expected_rejections}  # the 5 % of MALFORMED
        reasons = list(expected_rejections.values())  # the table's order: [0] not framed, [2] unknown schema id
        assert others == {reasons[0], reasons[2], _does_not_parse(MALFORMED[2][6:])}, others

        # A registry schema protoc cannot compile: the plan fails once, naming the pipeline, the
        # subject and the version, before the ledger is touched and without a retry.
        digest = p.ledger_digest()
        registry.register(f"{p.topic}-value", 'syntax = "proto3";\npackage offsetbatch.sample;\n'
                                              'message Event { strin event_id = 1; }\n', "PROTOBUF")
        broken = p.run(BASE + H)
        broken.assert_failed_with(f"pipeline {p.name}: the Protobuf schema of subject '{p.topic}-value' version 3 "
                                  f"(id 3) does not compile (protoc: ")
        assert "AirflowFailException" in broken.output and "starting task_id=spark_job" not in broken.output
        assert p.ledger_digest() == digest

        registry.stop()
        down = p.run(BASE + H)
        down.assert_failed_with(f"Schema registry {registry.url} (Airflow connection 'schema_registry_default') did "
                                f"not answer")
        down.assert_failed_with(f"pipeline {p.name}")
        assert "starting task_id=spark_job" not in down.output
        assert p.ledger_digest() == digest
    finally:
        registry.stop()
