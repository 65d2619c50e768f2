"""Value formats in real (in-process) Spark: every bad record is rejected once with its reason,
every good one kept, and ``raw`` keeps the bytes untouched (the job's parse step; the DAG-run tests
cover the rest of the job)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from offsetbatch.formats import ERROR, FORMATS, META

pytestmark = pytest.mark.integration
SCHEMA = "event_id STRING, kind STRING, n INT"
GOOD_TS = "2026-10-05T00:00:00Z"

CASES = [  # (value bytes, expected _error)
    (b'{"event_id": "a", "kind": "click", "n": 1}', None),
    ('{"event_id": "b\ufffd", "kind": "click", "n": 2}'.encode(), None),  # U+FFFD itself is valid UTF-8
    ('{"event_id": "c\u00e9", "kind": "click"}'.encode(), None),
    (b'{"event_id": "d\xff\xfe", "kind": "click", "n": 3}', "value is not valid UTF-8"),  # inside a string
    (b'{"event_id": "e", "kind": "cl\xc3", "n": 4}', "value is not valid UTF-8"),  # truncated sequence
    (b"\xff\xfe\x00", "value is not valid UTF-8"),
    (b'{"event_id": "f", "kind": ', "malformed JSON"),
    (b"not json at all", "malformed JSON"),
    (b'{"event_id": "g", "kind": "click", "n": "many"}', "schema mismatch: value does not fit the declared schema"),
    (b'{"kind": "click", "n": 5}', "missing required field(s): event_id"),
    (None, "null value"),
]


def _records(spark, values):
    rows = [("t", 0, i, None, None, [], v) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, "kafka_topic STRING, kafka_partition INT, kafka_offset BIGINT, "
                                       "kafka_timestamp TIMESTAMP, kafka_key BINARY, "
                                       "kafka_headers ARRAY<STRUCT<key: STRING, value: BINARY>>, value BINARY")


def test_json_rejects_each_bad_record_with_its_reason_and_keeps_the_good_ones(spark):
    spec = SimpleNamespace(schema_ddl=SCHEMA, required=["event_id", "kind"])
    out = FORMATS["json"].parse(_records(spark, [v for v, _ in CASES]), spec)
    assert out.columns == [*META, "value", "event_id", "kind", "n", ERROR] and not FORMATS["json"].skips
    got = {r.kafka_offset: r for r in out.collect()}
    assert {i: got[i][ERROR] for i in got} == {i: e for i, (_, e) in enumerate(CASES)}
    assert got[1].event_id == "b\ufffd" and got[2].event_id == "c\u00e9" and got[2].n is None


def test_columns_added_before_the_parse_are_carried_through_in_order(spark):
    """What a step before the value's parse added (the key's parse, the tombstone flag) comes out of
    the parse unchanged and in its order, whatever its name; the format's own columns do not. The
    parse names them by a regex Spark expands (``formats.base.carried``), not by asking the frame."""
    from pyspark.sql import functions as F

    from offsetbatch.formats.base import carried

    records = _records(spark, [CASES[0][0]]).withColumns(
        {"key": F.lit("k"), "we.ird+(name)": F.lit(1), "_key_error": F.lit(None).cast("string")})
    spec = SimpleNamespace(schema_ddl=SCHEMA, required=["event_id"])
    out = FORMATS["json"].parse(records, spec)
    assert out.columns == [*META, "value", "event_id", "kind", "n", ERROR, "key", "we.ird+(name)", "_key_error"]
    assert out.select(carried(out, "event_id", "kind", "n", ERROR)).columns == ["key", "we.ird+(name)", "_key_error"]
    assert _records(spark, []).select(carried(_records(spark, []))).columns == []


def test_raw_keeps_every_value_byte_for_byte(spark):
    values = [v for v, _ in CASES]
    out = FORMATS["raw"].parse(_records(spark, values), SimpleNamespace(schema_ddl=None, required=[]))
    got = {r.kafka_offset: r for r in out.collect()}
    assert [None if got[i].value is None else bytes(got[i].value) for i in range(len(values))] == values
    assert all(r[ERROR] is None for r in got.values())


@pytest.mark.parametrize("value_format", ["json", "raw"])
def test_tombstones_are_kept_as_deletes_only_when_asked_and_only_with_a_key(spark, value_format):
    """``value.tombstones: delete`` (issue 44): a null value with a key is a row flagged
    ``kafka_tombstone`` (its value fields NULL, whatever is ``required``); without a key it deletes
    nothing and is rejected; by default a null value is rejected as before."""
    from offsetbatch.formats import TOMBSTONE
    from offsetbatch.job.transform import parse_records
    from offsetbatch.jobspec import JobSpec

    rows = [(b"k1", b'{"event_id": "a", "kind": "click", "n": 1}'), (b"k2", None), (None, None)]
    frame = spark.createDataFrame(
        [("t", 0, i, None, k, [], v) for i, (k, v) in enumerate(rows)],
        "kafka_topic STRING, kafka_partition INT, kafka_offset BIGINT, kafka_timestamp TIMESTAMP, kafka_key BINARY, "
        "kafka_headers ARRAY<STRUCT<key: STRING, value: BINARY>>, value BINARY")
    json_format = value_format == "json"

    def parsed(tombstones: str) -> list:
        spec = JobSpec(pipeline="p", batch_id=1, output_id=1, bootstrap="x:1", ranges=[], sink={"path": "/t"},
                       value_format=value_format, schema_ddl=SCHEMA if json_format else None,
                       required=["event_id", "kind"] if json_format else [], tombstones=tombstones)
        return sorted(parse_records(frame, spec).collect(), key=lambda r: r.kafka_offset)

    kept = parsed("delete")
    assert [(r.kafka_key, r[TOMBSTONE], r[ERROR]) for r in kept] == [
        (b"k1", False, None), (b"k2", True, None), (None, True, "tombstone without a key: it deletes nothing")]
    if json_format:
        assert [(r.event_id, r.kind) for r in kept[:2]] == [("a", "click"), (None, None)]
    default = parsed("reject")
    assert TOMBSTONE not in default[0].asDict()
    assert [r[ERROR] for r in default] == ([None, "null value", "null value"] if json_format else [None, None, None])


def test_debezium_envelopes_become_rows_deletes_skips_and_reasons(spark):
    """``value.format: debezium`` (issue 44) on Debezium's JSON envelope, with and without the
    converter's schema/payload wrapper: changes become rows (``before`` for a delete), what is not a
    change is skipped (never rejected), a truncate is fatal, a broken event is rejected with why.
    The events follow Debezium's documented PostgreSQL connector output (no Debezium server here)."""
    import json

    from offsetbatch.formats import SKIP
    from offsetbatch.job.transform import parse_records
    from offsetbatch.jobspec import JobSpec

    def event(op, before=None, after=None, lsn=None, wrap=False):
        body = {"before": before, "after": after, "op": op, "ts_ms": 1700000000000,
                "source": {"connector": "postgresql", "lsn": lsn, "table": "accounts"}}
        return json.dumps({"schema": {"type": "struct"}, "payload": body} if wrap else body).encode()

    values = [
        event("c", after={"id": 1, "name": "a"}, lsn=100),
        event("u", before={"id": 1, "name": "a"}, after={"id": 1, "name": "b"}, lsn=200, wrap=True),
        event("d", before={"id": 1, "name": None}, lsn=300),
        None,  # the tombstone after the delete
        json.dumps({"ts_ms": 1700000000000}).encode(),  # a heartbeat
        json.dumps({"source": {"lsn": 1}, "databaseName": "shop", "ddl": "ALTER TABLE accounts ADD c int",
                    "tableChanges": [{"type": "ALTER"}]}).encode(),
        event("m", lsn=350),
        json.dumps({"id": 2, "name": "x"}).encode(),  # a plain row, not an envelope
        event("x", after={"id": 2, "name": "x"}, lsn=360),
        event("d", lsn=370),
        event("u", after={"id": 3, "name": "c"}),  # no lsn
        event("c", after={"name": "no id"}, lsn=380),
        b'{"op": "c", "after": ',
        event("r", after={"id": 4, "name": "snap"}, lsn=390),
        event("t", lsn=400),
        event("u", after={"id": 5, "name": "e"}, lsn="0/16B3748"),  # a version of the wrong type
        event("u", after={"id": 6, "name": "f"}, lsn=10**20),  # past BIGINT
    ]
    frame = _records(spark, values)
    spec = JobSpec(pipeline="p", batch_id=1, output_id=1, bootstrap="x:1", ranges=[], sink={"path": "/t"},
                   value_format="debezium", schema_ddl="id INT, name STRING", required=["id"],
                   value_options={"version": "source.lsn", "truncate": "fail"})
    parsed = parse_records(frame, spec)
    assert SKIP in parsed.columns and FORMATS["debezium"].skips  # what the job counts and drops by
    got = sorted(parsed.collect(), key=lambda r: r.kafka_offset)
    assert [(r.id, r.name, r.cdc_op, r.cdc_deleted, r.cdc_version, r[ERROR], r[SKIP]) for r in got] == [
        (1, "a", "c", False, 100, None, None),
        (1, "b", "u", False, 200, None, None),
        (1, None, "d", True, 300, None, None),
        (None, None, None, False, None, None, "tombstone (Debezium writes one after each delete)"),
        (None, None, None, False, None, None, "heartbeat"),
        (None, None, None, False, 1, None, "schema change event"),
        (None, None, "m", False, 350, None, "logical decoding message (op 'm')"),
        (None, None, None, False, None, "not a Debezium change event: no 'op' field", None),
        (2, "x", "x", False, 360, "unknown Debezium op 'x'", None),
        (None, None, "d", True, 370, "a delete (op 'd') without 'before': the deleted key is unknown (give the "
                                     "source table a replica identity that includes the key)", None),
        (3, "c", "u", False, None, "no version at source.lsn", None),
        (None, "no id", "c", False, 380, "missing required field(s): id", None),
        (None, None, None, False, None, "malformed JSON", None),
        (4, "snap", "r", False, 390, None, None),
        (None, None, "t", False, 400, "fatal: a truncate (op 't') of the source table, which no row-level change "
                                      "can apply: set value.truncate: skip to skip truncates (the table keeps its "
                                      "rows), or re-snapshot the source table into a new pipeline", None),
        *[(key, name, "u", False, None, f"value.version source.lsn is {shown}, not a whole number within BIGINT "
           f"(-2^63 .. 2^63-1): a version orders a key's changes; point value.version at a numeric field "
           f"(source.lsn, ts_ms)", None) for key, name, shown in ((5, "e", "0/16B3748"),
                                                                  (6, "f", "100000000000000000000"))],
    ]
    skipping = replace(spec, value_options={"version": "source.lsn", "truncate": "skip"})
    truncate = [r for r in parse_records(frame, skipping).collect() if r.cdc_op == "t"][0]
    assert (truncate[ERROR], truncate[SKIP]) == (None, "truncate (op 't'), value.truncate: skip")
