"""The kafka sink with the real broker, Spark and Airflow: each batch's records published in one
Kafka transaction with its marker (docs/architecture.md, *The Kafka sink*). The output is read
with kafka-python consumers in ``read_committed`` and ``read_uncommitted`` mode, not with the
sink's code.

DAG runs are few (5 in all): the crash cases drive the commit task's own code
(``tasks.commit_step``) in a subprocess against a batch a real run planned and staged.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]  # Spark jobs on the suite's Connect server
BASE = datetime(2026, 11, 4, tzinfo=timezone.utc)
H = timedelta(hours=1)
OUT_PARTITIONS = 3
COMMIT = ("import sys\nfrom offsetbatch.dag.tasks import commit_step\nfrom offsetbatch.pipeline import Pipeline\n"
          "print(commit_step(Pipeline.load(sys.argv[1]), [int(sys.argv[2])], sys.argv[3]))\n")
TRANSFORM = "SELECT event_id, kind, user_id, event_time, kafka_topic, kafka_partition, kafka_offset FROM records"


def _pipeline(make_pipeline, kafka_broker, **sink):
    from kafka.admin import KafkaAdminClient, NewTopic

    p = make_pipeline(transform={"sql": TRANSFORM}, sink={"event_time_column": None, "type": "kafka",
                                                          "topic": "placeholder", **sink})
    out = f"out-{p.topic}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        admin.create_topics([NewTopic(out, OUT_PARTITIONS, 1)])
    finally:
        admin.close()
    import yaml

    from offsetbatch.config import load_config

    cfg = yaml.safe_load(p.config_path.read_text())
    cfg["sink"]["topic"] = out
    p.config_path.write_text(yaml.safe_dump(cfg))
    p.cfg = load_config(p.config_path)
    return p, out


def _read(bootstrap: str, topic: str, isolation: str) -> list:
    """Every record of ``topic`` a consumer in ``isolation`` mode gets, up to the end it may read."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation)
    try:
        tps = [TopicPartition(topic, i) for i in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)  # read_committed: the last stable offset
        out = []
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for _, msgs in consumer.poll(timeout_ms=2000).items():
                out.extend(msgs)
        return out
    finally:
        consumer.close()


def _check_exactly_once_in_order(p, records) -> None:
    """Every valid record of a committed batch exactly once, and per source partition in offset order."""
    ids = Counter(json.loads(r.value)["event_id"] for r in records)
    assert not [i for i, n in ids.items() if n > 1], "duplicates"
    read = {(r.partition, o) for b in p.ledger.list_batches(p.name, 100) if b.status == "committed"
            for r in b.ranges for o in range(r.from_offset, r.until_offset)}
    assert set(ids) == {i for po, i in p.produced.items() if i and po in read}
    by_source: dict[tuple[int, int], list[int]] = {}
    for r in records:
        h = dict(r.headers)
        assert int(h["offsetbatch.partition"]) % OUT_PARTITIONS == r.partition  # partitioning: source
        by_source.setdefault((r.partition, int(h["offsetbatch.partition"])), []).append(int(h["offsetbatch.offset"]))
    for offsets in by_source.values():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def _staged_attempt(p, batch_id: int) -> str:
    found = list(Path(p.table, "_offsetbatch", "attempts", f"batch_id={batch_id}").glob("attempt=*/_manifest.json"))
    assert len(found) == 1, found
    return found[0].parent.name.removeprefix("attempt=")


def _commit(p, batch_id: int, attempt: str, faults: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in p.env.items() if k != "OFFSETBATCH_FAULTS"}
    if faults:
        env["OFFSETBATCH_FAULTS"] = faults
    return subprocess.run([sys.executable, "-c", COMMIT, str(p.config_path), str(batch_id), attempt], env=env,
                          capture_output=True, text=True, timeout=300)


def test_hourly_kill9_with_the_transaction_open_and_after_its_commit(make_pipeline, kafka_broker):
    p, out = _pipeline(make_pipeline, kafka_broker, partitioning="source")
    p.produce(1200, start=BASE, hours=2)

    first = p.run(BASE)
    assert first.ok, first.output[-4000:]
    committed_1 = _read(p.bootstrap, out, "read_committed")
    _check_exactly_once_in_order(p, committed_1)

    crashed = p.run(BASE + H, faults="commit.before_transaction")
    crashed.assert_failed_with("injected fault at commit.before_transaction")
    attempt = _staged_attempt(p, 2)

    # kill -9 with the transaction open (every record sent and flushed, not committed)
    res = _commit(p, 2, attempt, "commit.kafka_records_sent:kill")
    assert res.returncode == -signal.SIGKILL, res.stdout[-3000:] + res.stderr[-3000:]
    assert p.ledger.get_batch(p.name, 2).stats["published_at"] is None
    uncommitted = _read(p.bootstrap, out, "read_uncommitted")
    rows_2 = p.ledger.get_batch(p.name, 2).stats["rows_out"]
    assert len(uncommitted) == len(committed_1) + rows_2  # a read_uncommitted consumer sees the open transaction
    assert len(_read(p.bootstrap, out, "read_committed")) == len(committed_1)  # a read_committed one does not

    # the rerun fences the dead producer (its transaction is aborted), publishes, and dies after the
    # Kafka commit, before the ledger marks the batch published
    res = _commit(p, 2, attempt, "commit.after_kafka_commit:kill")
    assert res.returncode == -signal.SIGKILL, res.stdout[-3000:] + res.stderr[-3000:]
    assert p.ledger.get_batch(p.name, 2).stats["published_at"] is None

    # the next rerun finds the marker: nothing is sent again
    res = _commit(p, 2, attempt)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "not published again" in res.stdout + res.stderr
    assert p.ledger.get_batch(p.name, 2).stats["published_at"] is not None
    committed = _read(p.bootstrap, out, "read_committed")
    _check_exactly_once_in_order(p, committed)
    assert len(committed) == len(committed_1) + rows_2
    # read_uncommitted: the aborted copy of batch 2 is there too (why consumers must use read_committed)
    dup = Counter(json.loads(r.value)["event_id"] for r in _read(p.bootstrap, out, "read_uncommitted"))
    assert sum(1 for n in dup.values() if n == 2) == rows_2

    # malformed records as Parquet under <path>/_rejected, batch by batch
    from offsetbatch_dev import verify

    committed_ranges = [r for b in p.ledger.list_batches(p.name, 10) if b.status == "committed" for r in b.ranges]
    assert sorted(verify.rejected_offsets(p.table)) == sorted(
        po for po in p.malformed() if any(r.partition == po[0] and r.from_offset <= po[1] < r.until_offset
                                          for r in committed_ranges))

    # a broker crash and restart between runs: the transaction coordinator and the marker come back
    # from the log; the next hour lands once
    kafka_broker.stop(hard=True)
    kafka_broker.start()
    p.produce(300, start=BASE + 2 * H, hours=1)
    third = p.run(BASE + 2 * H)
    assert third.ok, third.output[-4000:]
    assert [b.status for b in p.ledger.list_batches(p.name, 10)] == ["committed"] * 3
    _check_exactly_once_in_order(p, _read(p.bootstrap, out, "read_committed"))

    # a replay would append batch 1 again: refused when planning, naming the way out
    replay = p.run(None, conf={"mode": "replay", "batch_ids": "1", "reason": "test"})
    replay.assert_failed_with("a Kafka topic is append-only")
    assert "sink.republish: true" in replay.output and "AirflowFailException" in replay.output


def test_key_partitioning_keys_and_values(make_pipeline, kafka_broker):
    """partitioning: key (murmur2, as the Java client): each record's key is its user_id's text."""
    from kafka.partitioner.default import murmur2

    p, out = _pipeline(make_pipeline, kafka_broker, key=["user_id"])
    p.produce(300, start=BASE, hours=1)
    first = p.run(BASE)
    assert first.ok, first.output[-4000:]
    records = _read(p.bootstrap, out, "read_committed")
    assert len(records) == p.ledger.get_batch(p.name, 1).stats["rows_out"]
    for r in records:
        user = json.loads(r.value)["user_id"]
        if user is not None:
            assert r.key == str(user).encode()
            assert r.partition == (murmur2(r.key) & 0x7FFFFFFF) % OUT_PARTITIONS


def test_a_missing_output_topic_is_refused_before_the_ledger_is_opened(make_pipeline, kafka_broker):
    """An output topic that does not exist used to be found after the batch was committed (the
    producer timing out twice, 120 s each, naming no topic, while status said committed). Now the
    plan task refuses it before it opens the ledger (and before a Spark job is spent), naming the
    topic, without retries; once the topic exists, the run goes through. The commit checks again
    before its ledger transaction (test_secure_kafka: an ACL revoked between plan and commit)."""
    import yaml
    from kafka.admin import KafkaAdminClient, NewTopic

    from offsetbatch.config import load_config

    p = make_pipeline(transform={"sql": TRANSFORM}, sink={"event_time_column": None, "type": "kafka",
                                                          "topic": "placeholder"})
    p.produce(120, start=BASE, hours=1)
    # First the write-back loop through a second connection to the same cluster: the config cannot
    # tell (another conn_id), the plan task compares the cluster ids and refuses before the ledger.
    p.env = {**p.env, "AIRFLOW_CONN_KAFKA_OUT": json.dumps({"conn_type": "kafka",
                                                             "extra": {"bootstrap.servers": p.bootstrap}})}
    cfg = yaml.safe_load(p.config_path.read_text())
    cfg["sink"].update(topic=p.topic, conn_id="kafka_out")
    p.config_path.write_text(yaml.safe_dump(cfg))
    before, digest = p.snapshot(), p.ledger_digest()
    loop = p.run(BASE)
    loop.assert_failed_with(f"sink.topic '{p.topic}' is a topic this pipeline reads: connection 'kafka_out' reaches "
                            f"the same Kafka cluster as the source's")
    assert "AirflowFailException" in loop.output and "starting task_id=spark_job" not in loop.output
    assert p.snapshot() == before and p.ledger_digest() == digest

    out = f"missing-{p.topic}"
    cfg["sink"].update(topic=out, conn_id="kafka_default")
    p.config_path.write_text(yaml.safe_dump(cfg))
    p.cfg = load_config(p.config_path)

    refused = p.run(BASE)
    refused.assert_failed_with(f"topic(s) {out} do not exist on {p.bootstrap}")
    assert "AirflowFailException" in refused.output and "starting task_id=spark_job" not in refused.output
    assert "Nothing was changed. Create them" in refused.output
    assert p.snapshot() == before and p.ledger_digest() == digest

    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        admin.create_topics([NewTopic(out, OUT_PARTITIONS, 1)])
    finally:
        admin.close()
    assert p.run(BASE).ok
    assert [b.status for b in p.ledger.list_batches(p.name, 10)] == ["committed"]
    _check_exactly_once_in_order(p, _read(p.bootstrap, out, "read_committed"))


def test_a_record_larger_than_the_output_topic_takes_is_refused_before_the_ledger_commit(make_pipeline, kafka_broker):
    """A 3 MB record (the source topic takes 8 MiB, the output topic Kafka's default 1 MiB) used to
    be found by the publish after the ledger commit: MSG_SIZE_TOO_LARGE on every retry, and every
    later plan failing in ``publish_pending`` (issue 41, case 10). The commit now measures the
    staged records against the topic's max.message.bytes before its ledger transaction and refuses
    the batch naming the record; nothing is committed or published. Once the topic takes it, the
    next run lands the batch, the large record with it, once."""
    import base64
    import os

    from kafka import KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    def take_8_mib(topic: str) -> None:
        admin = KafkaAdminClient(bootstrap_servers=p.bootstrap)
        try:  # (kafka-python checks the key against the topic's dynamic configs, which a new topic may lack yet)
            done = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"max.message.bytes": "8388608"})],
                                       raise_on_unknown=False)
        finally:
            admin.close()
        assert done == {"topic": {topic: "OK"}}, done

    p, out = _pipeline(make_pipeline, kafka_broker, partitioning="source")
    admin = KafkaAdminClient(bootstrap_servers=p.bootstrap)
    try:
        admin.create_topics([NewTopic(p.topic, 2, 1, topic_configs={"max.message.bytes": "8388608"})])
    finally:
        admin.close()
    p.produce(200, start=BASE, hours=1, malformed_fraction=0)
    huge = {"event_id": "huge-1", "kind": base64.b64encode(os.urandom(2_300_000)).decode(), "user_id": 1,
            "page": "/", "event_time": (BASE + timedelta(minutes=30)).isoformat(), "amount": 1.0}
    producer = KafkaProducer(bootstrap_servers=p.bootstrap, max_request_size=8_388_608)
    try:
        meta = producer.send(p.topic, json.dumps(huge).encode(), partition=1,
                             timestamp_ms=int((BASE + timedelta(minutes=30)).timestamp() * 1000)).get(timeout=60)
    finally:
        producer.close()
    p.produced[(meta.partition, meta.offset)] = "huge-1"

    refused = p.run(BASE)
    refused.assert_failed_with(f"the record from {p.topic}/1 offset {meta.offset} is ")
    assert f"topic {out}'s max.message.bytes allows 1,048,588" in refused.output
    assert "Nothing was committed; the batch stays planned" in refused.output
    assert refused.output.count("SinkSchemaError") >= 1 and "AirflowFailException" in refused.output  # no retry
    # nothing changed: the batch is planned, nothing is in the topic, not even an open transaction
    [batch] = p.ledger.list_batches(p.name, 10)
    assert batch.status == "planned"
    assert _read(p.bootstrap, out, "read_uncommitted") == []

    take_8_mib(out)
    landed = p.run(BASE)
    assert landed.ok, landed.output[-4000:]
    records = _read(p.bootstrap, out, "read_committed")
    _check_exactly_once_in_order(p, records)
    [big] = [r for r in records if json.loads(r.value)["event_id"] == "huge-1"]
    assert json.loads(big.value)["kind"] == huge["kind"]
