"""Spark reads exact per-partition offset ranges from the local broker, with the cached connector
and no network (the job's read path, docs/architecture.md, What it is)."""

from __future__ import annotations

import json

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

pytestmark = pytest.mark.integration


def test_reads_exactly_the_given_ranges(kafka_broker, spark):
    topic = "exact-ranges"
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([NewTopic(topic, 3, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
    for p in range(3):
        for i in range(50):
            producer.send(topic, partition=p, key=f"k{p}".encode(), value=json.dumps({"p": p, "i": i}).encode())
    producer.flush()
    producer.close()

    ranges = {"0": (10, 20), "1": (0, 3), "2": (49, 50)}  # [from, until)
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {p: r[0] for p, r in ranges.items()}}))
        .option("endingOffsets", json.dumps({topic: {p: r[1] for p, r in ranges.items()}}))
        .option("failOnDataLoss", "true")
        .load()
    )
    got = sorted((r.partition, r.offset, json.loads(r.value)["i"]) for r in df.select("partition", "offset", "value").collect())
    expected = sorted((int(p), o, o) for p, (a, b) in ranges.items() for o in range(a, b))
    assert got == expected
    assert df.rdd.getNumPartitions() >= 3  # at least one Spark partition per Kafka partition
