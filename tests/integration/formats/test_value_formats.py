"""Value formats in real (in-process) Spark: every bad record is rejected once with its reason,
every good one kept, and ``raw`` keeps the bytes untouched (the job's parse step; the DAG-run tests
cover the rest of the job)."""

from __future__ import annotations

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
    assert out.columns == [*META, "value", "event_id", "kind", "n", ERROR]
    got = {r.kafka_offset: r for r in out.collect()}
    assert {i: got[i][ERROR] for i in got} == {i: e for i, (_, e) in enumerate(CASES)}
    assert got[1].event_id == "b\ufffd" and got[2].event_id == "c\u00e9" and got[2].n is None


def test_raw_keeps_every_value_byte_for_byte(spark):
    values = [v for v, _ in CASES]
    out = FORMATS["raw"].parse(_records(spark, values), SimpleNamespace(schema_ddl=None, required=[]))
    got = {r.kafka_offset: r for r in out.collect()}
    assert [None if got[i].value is None else bytes(got[i].value) for i in range(len(values))] == values
    assert all(r[ERROR] is None for r in got.values())
