"""The kafka sink's settings and its refusals, without a broker."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from offsetbatch.errors import RunRequestError, SinkSchemaError
from offsetbatch.sinks import settings_for, sink_for

BASE = {"type": "kafka", "path": "/s", "topic": "clean-events"}


@pytest.mark.parametrize("field, value, message", [
    ("producer", {"acks": "1"}, "producer setting 'acks' is not one of"),
    ("producer", {"enable.idempotence": False}, "the transactional and idempotence settings are the sink's own"),
    ("producer", {"linger.ms": "soon"}, "producer setting 'linger.ms' must be int"),
    ("producer", {"compression.type": "brotli"}, "compression.type must be one of none, gzip, snappy, lz4, zstd"),
    ("producer", {"transaction.timeout.ms": 3_600_000}, "must not exceed the broker's transaction.max.timeout.ms"),
    # what only librdkafka knows, asked at load (issue 41, case 11): a publish that can never start after
    # the ledger commit would stall the pipeline
    ("producer", {"batch.size": -5}, "sink.producer {'batch.size': -5}: librdkafka refuses these producer settings: "
                                     "Configuration property \"batch.size\" value -5 is outside allowed range"),
    ("producer", {"max.request.size": 10}, "property \"message.max.bytes\" value 10 is outside allowed range "
                                           "1000..1000000000"),
    ("partitioning", "key", "partitioning 'key' needs key"),
    ("topic", "bad topic", "is not a Kafka topic name"),
    ("key", ["user id"], "is not a column name"),
    ("event_time_column", "ts", "no meaning for a topic"),
    ("republsh", True, "Extra inputs are not permitted"),
])
def test_settings_refusals_name_the_field(field, value, message):
    with pytest.raises((ValidationError, ValueError)) as err:
        settings_for({**BASE, field: value})
    assert message in str(err.value)


def test_defaults_and_producer_arguments():
    s = settings_for(BASE)
    assert s.partitioned_by == "source" and settings_for({**BASE, "key": ["user_id"]}).partitioned_by == "key"
    conf = settings_for({**BASE, "producer": {"linger.ms": "50", "compression.type": "lz4",
                                              "max.request.size": 8_388_608}}).producer_config()
    assert conf == {"linger.ms": 50, "compression.type": "lz4", "transaction.timeout.ms": 300_000,
                    "batch.size": 1_048_576, "message.max.bytes": 8_388_608}


def test_rereads_are_refused_unless_republish():
    sink = sink_for("orders", BASE)
    assert sink.transactional_id == "offsetbatch.orders.clean-events"
    assert sink.marker_group == "offsetbatch.orders.published"
    with pytest.raises(RunRequestError, match=r"pipeline orders, topic clean-events: a replay would re-read batch\(es\) "
                                              r"3, 4, and a Kafka topic is append-only.*sink.republish: true"):
        sink.check_reread([3, 4], "a replay")
    with pytest.raises(SinkSchemaError, match="re-reads batch 3's offsets and sink.republish is false"):
        sink.check_publishable(7, 3, "a")
    ok = sink_for("orders", {**BASE, "republish": True})
    ok.check_reread([3], "a rewind")
    # past the republish rule, check_publishable asks the broker whether the topics exist
    # (tests/integration/sinks/test_kafka_sink.py, a missing output topic)


@pytest.mark.parametrize("topics", [["a"], ["b", "a"]])
def test_rows_are_sent_in_source_offset_order_chunk_by_chunk(topics):
    """The publish order (per source partition, by offset) holds across chunks, for one topic (sorted
    on the integer columns only) and for several (topic first)."""
    import random

    import pyarrow as pa

    rows = [(t, p, o) for t in topics for p in range(3) for o in range(20)]
    random.Random(7).shuffle(rows)
    table = pa.table({"kafka_topic": [r[0] for r in rows], "kafka_partition": pa.array([r[1] for r in rows], pa.int32()),
                      "kafka_offset": pa.array([r[2] for r in rows], pa.int64()), "_value": [str(r) for r in rows]})
    sink = sink_for("orders", BASE)
    chunks = list(sink._in_order(table, 7))
    assert max(c.num_rows for c in chunks) == 7
    sent = [(t, p, o) for c in chunks for t, p, o in zip(*(c.column(n).to_pylist() for n in
                                                           ("kafka_topic", "kafka_partition", "kafka_offset")))]
    assert sent == sorted(rows)
