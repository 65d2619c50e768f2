"""The project's own Kafka 4 broker (KRaft, from Maven Central jars), exercised with kafka-python."""

from __future__ import annotations

import socket

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from offsetbatch.dev.stack.kafka_broker import BrokerError, KafkaBroker

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int = 1) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i, v in enumerate(values):
        producer.send(topic, value=v, partition=i % partitions)
    producer.flush()
    producer.close()


def _consume_all(bootstrap: str, topic: str, partitions: int = 1) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    end = consumer.end_offsets(tps)
    out: list[bytes] = []
    while any(consumer.position(tp) < end[tp] for tp in tps):
        for records in consumer.poll(timeout_ms=2000).values():
            out.extend(r.value for r in records)
    consumer.close()
    return out


def test_produce_and_consume(kafka_broker):
    values = [f"record-{i}".encode() for i in range(500)]
    _produce(kafka_broker.bootstrap, "broker-smoke", values, partitions=3)
    assert sorted(_consume_all(kafka_broker.bootstrap, "broker-smoke", 3)) == sorted(values)


def test_start_twice_is_harmless(kafka_broker):
    pid = kafka_broker.pid()
    kafka_broker.start()
    assert kafka_broker.pid() == pid


def test_port_in_use_is_a_clear_error(test_state):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        broker = KafkaBroker(port=port, home=test_state / "kafka-port-clash")
        with pytest.raises(BrokerError, match=f"port 127.0.0.1:{port} is already in use"):
            broker.start()


def test_restart_keeps_data_and_wipe_removes_it(test_state):
    broker = KafkaBroker(port=29092, home=test_state / "kafka-restart")
    broker.wipe()
    broker.start()
    try:
        values = [f"durable-{i}".encode() for i in range(100)]
        _produce(broker.bootstrap, "durable", values)
        broker.stop(hard=True)  # a crash, not a clean shutdown
        assert broker.pid() is None
        broker.start()
        assert _consume_all(broker.bootstrap, "durable") == values
    finally:
        broker.wipe()
    assert not broker.data_dir.exists()
