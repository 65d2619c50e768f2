"""The publish producer's own logic, without a broker: a full local queue never drops a record,
and librdkafka's errors are sorted into "no retry helps" (an ACL) and "a retry may" (the rest,
aborting the transaction first when librdkafka says it must be). The transaction itself runs on
the real broker in tests/integration/sinks/test_kafka_sink.py and test_secure_kafka.py."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from offsetbatch.sinks.kafka.producer import ProducerRefusedError, PublishFailedError, TransactionalProducer
from offsetbatch.source.connection import from_settings


class FakeProducer:
    """Stands in for confluent_kafka.Producer: ``produce`` raises ``BufferError`` on every
    ``full_every``-th call until ``poll`` has run, as librdkafka does when its queue is full."""

    def __init__(self, full_every: int = 0, fail: KafkaError | None = None):
        self.full_every, self.fail = full_every, fail
        self.produced: list[tuple] = []
        self.calls = self.polls = self.aborts = 0
        self._full = False

    def produce(self, topic, value, key, partition, headers=None):
        self.calls += 1
        if self.full_every and self.calls % self.full_every == 0:
            self._full = True
        if self._full:
            raise BufferError("Local: Queue full")
        self.produced.append((topic, value, key, partition, headers))

    def poll(self, timeout):
        self.polls += 1
        self._full = False
        return 0

    def commit_transaction(self, timeout):
        raise KafkaException(self.fail)

    def abort_transaction(self, timeout):
        self.aborts += 1

    def flush(self, timeout):
        return 0


def _producer(fake: FakeProducer) -> TransactionalProducer:
    producer = TransactionalProducer.__new__(TransactionalProducer)
    producer.client = from_settings("out", {"bootstrap.servers": "127.0.0.1:9092"})
    producer.transactional_id = "offsetbatch.p.t"
    producer._producer = fake
    producer._open = True
    return producer


def test_a_full_queue_waits_for_deliveries_and_drops_nothing():
    fake = FakeProducer(full_every=7)
    records = [(f"v{i}".encode(), f"k{i}".encode(), [("h", b"x")], i % 3) for i in range(100)]
    assert _producer(fake).produce("out", records) == 100
    assert [(v, k, part) for _, v, k, part, _ in fake.produced] == [(v, k, part) for v, k, _, part in records]
    assert fake.polls >= 14  # one wait per full queue


@pytest.mark.parametrize("code, kind", [
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, ProducerRefusedError),
    (KafkaError.GROUP_AUTHORIZATION_FAILED, ProducerRefusedError),
    (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ProducerRefusedError),
    (KafkaError._TIMED_OUT, PublishFailedError),
])
def test_errors_are_sorted_by_whether_a_retry_can_help(code, kind):
    fake = FakeProducer(fail=KafkaError(code, "refused", txn_requires_abort=code == KafkaError._TIMED_OUT))
    producer = _producer(fake)
    with pytest.raises(kind) as err:
        producer._call("commit_transaction", fake.commit_transaction, 1.0)
    assert type(err.value) is kind and "commit_transaction: " in str(err.value)
    # an abortable error aborts the open transaction before it is reported
    assert fake.aborts == (1 if code == KafkaError._TIMED_OUT else 0)
