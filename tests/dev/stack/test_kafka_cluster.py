"""Three combined KRaft nodes on loopback (``offsetbatch-stack kafka start --brokers 3``, issue 17):
replication factor 3 and ``min.insync.replicas=2`` by default, internal topics included; acks=all
writes and reads survive a node's kill -9, and the node comes back from its own data.

Apart from test_kafka_broker.py (the single broker), so each file stays well under 90 s."""

from __future__ import annotations

import time

import pytest
from harness import worker_port
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.structs import OffsetAndMetadata

from offsetbatch_dev.stack import cli
from offsetbatch_dev.stack.kafka_broker import BrokerError
from offsetbatch_dev.stack.kafka_cluster import KafkaCluster

pytestmark = pytest.mark.integration

PORT = worker_port(29192)  # clients 29192-29194, controllers 29195-29197
TOPIC, DEFAULTS_TOPIC = "replicated", "broker-defaults"


@pytest.fixture(scope="module")
def kafka_cluster(test_state):
    cluster = KafkaCluster(port=PORT, home=test_state / "kafka-cluster")
    cluster.wipe()
    cluster.start()
    yield cluster
    cluster.wipe()


def _produce_acks_all(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=50, request_timeout_ms=10_000,
                             max_block_ms=60_000)
    try:
        for v in values:
            producer.send(topic, value=v)
        producer.flush(timeout=90)
    finally:
        producer.close(timeout=5)


def _consume_all(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
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


def _min_isr(cluster: KafkaCluster, topic: str) -> str:
    """The topic's effective min.insync.replicas. A broker that has just learned of the topic can
    answer with no configs for it yet: ask again until it has them (bounded)."""
    deadline = time.monotonic() + 30
    while True:
        admin = cluster.admin_client()
        try:
            cfg = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, ["min.insync.replicas"])],
                                         config_filter="all")  # kafka-python's default: only modified keys
        finally:
            admin.close()
        found = cfg["topic"][topic].get("min.insync.replicas")
        if found is not None or time.monotonic() > deadline:
            assert found is not None, f"no broker reported min.insync.replicas of {topic} within 30 s: {cfg}"
            return found["value"]


def test_three_replicas_and_min_isr_two_by_default_and_on_request(kafka_cluster):
    assert kafka_cluster.bootstrap == ",".join(f"127.0.0.1:{PORT + i}" for i in range(3))
    assert sorted(kafka_cluster.pids()) == [1, 2, 3] and all(kafka_cluster.pids().values())
    assert kafka_cluster.live_nodes() == {1, 2, 3}
    kafka_cluster.create_topic(TOPIC, partitions=2)  # replication 3, min.insync.replicas 2, explicitly
    admin = kafka_cluster.admin_client()
    try:
        admin.create_topics([NewTopic(DEFAULTS_TOPIC, 1, -1)])  # the brokers' defaults decide
    finally:
        admin.close()
    kafka_cluster.wait_in_sync(DEFAULTS_TOPIC)
    for topic, partitions in ((TOPIC, 2), (DEFAULTS_TOPIC, 1)):
        parts = kafka_cluster.partitions(topic)
        assert sorted(parts) == list(range(partitions))
        for p in parts.values():
            assert sorted(p["replicas"]) == [1, 2, 3] and sorted(p["isr"]) == [1, 2, 3] and p["leader"] in (1, 2, 3)
        assert _min_isr(kafka_cluster, topic) == "2"
    # Group offsets (the pipeline's lag mirror) are replicated too.
    consumer = KafkaConsumer(bootstrap_servers=kafka_cluster.bootstrap, group_id="cluster-group", enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(0, "", -1)})
    finally:
        consumer.close()
    offsets = kafka_cluster.partitions("__consumer_offsets")
    assert offsets and all(len(p["replicas"]) == 3 for p in offsets.values())
    assert kafka_cluster.start() < 5  # start twice: harmless


def test_acks_all_survives_kill_9_of_a_leader_and_the_node_comes_back(kafka_cluster):
    """kill -9 the node leading partition 0: acks=all writes and reads go on through the other two
    (its ISR shrinks to 2 = min.insync.replicas), nothing acknowledged is lost; the node restarts
    from its own data and catches up."""
    before = [f"before-{i}".encode() for i in range(200)]
    _produce_acks_all(kafka_cluster.bootstrap, TOPIC, before)
    leader = kafka_cluster.leader_of(TOPIC, 0)
    victim = kafka_cluster.node(leader)
    pid = victim.pid()
    victim.stop(hard=True)
    assert victim.pid() is None and pid not in kafka_cluster.pids().values()

    after = [f"after-{i}".encode() for i in range(200)]
    _produce_acks_all(kafka_cluster.bootstrap, TOPIC, after)  # waits for a new leader, then 2 in-sync copies
    assert kafka_cluster.leader_of(TOPIC, 0) not in (-1, leader)
    assert leader not in kafka_cluster.partitions(TOPIC)[0]["isr"]
    assert sorted(_consume_all(kafka_cluster.bootstrap, TOPIC, 2)) == sorted(before + after)

    victim.start()
    kafka_cluster.wait_in_sync(TOPIC)
    assert kafka_cluster.live_nodes() == {1, 2, 3}
    assert sorted(_consume_all(victim.bootstrap, TOPIC, 2)) == sorted(before + after)


def test_other_ports_need_a_wipe_and_a_cluster_needs_three_brokers(kafka_cluster, capsys):
    other = KafkaCluster(port=PORT + 50, home=kafka_cluster.home)
    with pytest.raises(BrokerError, match=rf"formatted with 3 brokers on ports from {PORT}, not 3 from {PORT + 50}: "
                                          rf"start it with --brokers 3 --port {PORT}, or wipe it first"):
        other.start()
    assert other.pids() == kafka_cluster.pids()  # it still knows (and could stop) the running nodes
    with pytest.raises(BrokerError, match="at least 3 brokers"):
        KafkaCluster(port=PORT, brokers=2, home=kafka_cluster.home / "two")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["kafka", "start", "--brokers", "3", "--secure"])
    assert exit_info.value.code == 2
    assert "--brokers with --secure/--acl is not supported yet" in capsys.readouterr().err
