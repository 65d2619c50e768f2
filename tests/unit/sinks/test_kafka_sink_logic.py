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
    ("producer", {"compression.type": "lz4"}, "lz4 and snappy need Python packages"),
    ("producer", {"transaction.timeout.ms": 3_600_000}, "must not exceed the broker's transaction.max.timeout.ms"),
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
    kwargs = settings_for({**BASE, "producer": {"linger.ms": "50", "compression.type": "none"}}).producer_kwargs()
    assert kwargs["linger_ms"] == 50 and kwargs["compression_type"] is None
    assert kwargs["transaction_timeout_ms"] == 300_000 and kwargs["batch_size"] == 1_048_576


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
    # (tests/integration/test_kafka_sink.py, a missing output topic)
