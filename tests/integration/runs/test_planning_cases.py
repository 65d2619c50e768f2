"""Planner behaviour on the real broker through real DAG runs: caps, new and vanished partitions,
retention gaps (fail and skip), concurrent runs."""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pytest
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTP
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]  # Spark jobs on the suite's Connect server
BASE = datetime(2026, 11, 3, tzinfo=timezone.utc)
H = timedelta(hours=1)


def test_caps_split_a_backlog_over_several_runs(make_pipeline):
    p = make_pipeline(caps={"max_records_per_partition": 300, "max_records_per_batch": 500})
    p.produce(2000, start=BASE, hours=1, partitions=2)
    for _ in range(4):
        outcome = p.run(None)  # manual run without a data interval: cut at the log end, then capped
        assert outcome.ok, outcome.output[-4000:]
    batches = p.ledger.list_batches(p.name)
    assert len(batches) == 4
    assert all(b.records <= 500 and all(r.size <= 300 for r in b.ranges) for b in batches)
    assert sum(b.records for b in batches) == 2000
    empty = p.run(None)
    assert empty.ok and "nothing new to read" in empty.output
    assert len(p.ledger.list_batches(p.name)) == 4
    report = p.check()
    assert report.ok, report.summary()


def test_a_partition_added_between_runs_is_picked_up(make_pipeline):
    p = make_pipeline()
    p.produce(600, start=BASE, hours=1, partitions=2)
    assert p.run(None).ok
    admin = KafkaAdminClient(bootstrap_servers=p.bootstrap)
    admin.create_partitions({p.topic: NewPartitions(3)})
    admin.close()
    p.produce(900, start=BASE + H, hours=1, partitions=3)
    outcome = p.run(None)
    assert outcome.ok, outcome.output[-4000:]
    newest = p.ledger.list_batches(p.name, 1)[0]
    assert any(r.partition == 2 and r.from_offset == 0 and r.until_offset == 300 for r in newest.ranges)
    report = p.check()
    assert report.ok, report.summary()


def test_a_vanished_partition_fails_the_run_and_changes_nothing(make_pipeline):
    p = make_pipeline()
    p.produce(600, start=BASE, hours=1, partitions=3)
    assert p.run(None).ok
    _delete_topic(p)
    p.produced.clear()
    p.produce(100, start=BASE + H, hours=1, partitions=2)
    before = p.snapshot()
    outcome = p.run(None)
    outcome.assert_failed_with(f"partition(s) {p.topic}/2 (frontier 200) are in the ledger but no longer exist in Kafka")
    assert p.snapshot() == before


def _delete_topic(p) -> None:
    """Delete the pipeline's topic and wait until the broker no longer lists it."""
    admin = KafkaAdminClient(bootstrap_servers=p.bootstrap)
    admin.delete_topics([p.topic])
    deadline = time.monotonic() + 60
    while p.topic in admin.list_topics() and time.monotonic() < deadline:
        time.sleep(0.2)  # polling the broker's answer, bounded
    admin.close()


def _delete_records(p, partition: int, before_offset: int) -> set[tuple[int, int]]:
    admin = KafkaAdminClient(bootstrap_servers=p.bootstrap)
    admin.delete_records({KafkaTP(p.topic, partition): before_offset})
    admin.close()
    return {po for po in p.produced if po[0] == partition and po[1] < before_offset}


def test_retention_loss_fails_by_default_and_is_recorded_as_a_gap_with_skip(make_pipeline):
    strict = make_pipeline("_fail")
    skip = make_pipeline("_skip", on_data_loss="skip")
    skip.topic = strict.topic  # both read the same topic
    skip.config_path.write_text(skip.config_path.read_text().replace(f"t-{skip.name}".replace("_", "-"), strict.topic))
    strict.produce(1000, start=BASE, hours=1, partitions=2)  # 500 per partition
    skip.produced = strict.produced
    assert strict.run(None).ok and skip.run(None).ok
    strict.produce(1000, start=BASE + H, hours=1, partitions=2)  # offsets 500..999 per partition
    lost = _delete_records(strict, partition=0, before_offset=700)

    before = strict.snapshot()
    failed = strict.run(None)
    failed.assert_failed_with(f"offsets [500, 700) of {strict.topic}/0 were deleted by retention before they were read")
    assert strict.snapshot() == before

    outcome = skip.run(None)
    assert outcome.ok, outcome.output[-4000:]
    gaps = skip.ledger.list_gaps(skip.name)
    assert [(g.topic, g.partition, g.from_offset, g.until_offset) for _, g in gaps] == [(strict.topic, 0, 500, 700)]
    newest = skip.ledger.list_batches(skip.name, 1)[0]
    assert sorted((r.partition, r.from_offset, r.until_offset) for r in newest.ranges) == [(0, 700, 1000), (1, 500, 1000)]
    lost_ids = {po for po in lost if po[1] >= 500}
    report = skip.check(lost=lost_ids)  # everything but the deleted records, exactly once; gap keeps ranges contiguous
    assert report.ok, report.summary()


def test_two_runs_started_at_once_stay_exactly_once(make_pipeline):
    p = make_pipeline()
    p.produce(1500, start=BASE, hours=3, partitions=2)
    p.register()  # two `dags test` processes would otherwise race to insert the new DAG's Asset row
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda h: p.run(BASE + h * H, own_process=True), (0, 1)))
    assert all(o.ok for o in outcomes), [o.output[-3000:] for o in outcomes if not o.ok]
    logs = "".join(o.output for o in outcomes)
    # The second planner found the first run's batch pending and took it up too; the run that lost
    # the race found the batch committed before its Spark job started (its spark_job task skipped),
    # at its commit, or when its staging was cleared under it (both discard its own output). Which
    # one is timing: a Spark Connect job of 500 records takes under a second, so the first run may
    # commit while the second is still planning.
    assert "not committed; run" in logs
    assert ("nothing left to run: batch 1 is already committed" in logs
            or "already committed (attempt" in logs or "this attempt's output is discarded" in logs), logs[-6000:]
    assert len(p.ledger.list_batches(p.name)) == 1
    for _ in range(2):
        assert p.run(None).ok
    report = p.check()
    assert report.ok, report.summary()


def test_a_record_stamped_far_in_the_future_does_not_stall_the_pipeline(make_pipeline):
    """One record stamped in 2099 (the topic allows it; brokers refuse it by default since Kafka
    3.6): every later time cut lands on it (Kafka's time index is monotonic). Before the fix each
    hourly run read nothing, green, forever, and status showed 0 s of time lag; now the run reads
    the partition to its log end, says why, and status counts the wait, not the record's age."""
    p = make_pipeline()
    p.produce(300, start=BASE, hours=1, partitions=1, malformed_fraction=0)  # hour 0: offsets 0..299
    admin = KafkaAdminClient(bootstrap_servers=p.bootstrap)
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, p.topic,
                                        configs={"message.timestamp.after.max.ms": str(2**63 - 1)})])
    admin.close()
    p.produce(1, start=datetime(2099, 1, 1, tzinfo=timezone.utc), partitions=1, malformed_fraction=0)  # offset 300
    p.produce(200, start=BASE + H, hours=2, partitions=1, malformed_fraction=0)  # hours 1 and 2: 301..500

    first = p.run(BASE)  # [BASE, BASE+1h): cut at the first record stamped >= BASE+1h, the 2099 one
    assert first.ok, first.output[-4000:]
    assert [(r.from_offset, r.until_offset) for r in p.ledger.list_batches(p.name)[0].ranges] == [(0, 300)]

    [status] = json.loads(subprocess.run(["offsetbatch", "--pipelines", str(p.root), "--json", "status", p.name],
                                       env=p.env, capture_output=True, text=True, timeout=120).stdout)
    [part] = status["partitions"]
    assert part["lag_records"] == 201 and part["lag_seconds"] > 0, part
    assert part["lag_note"].startswith("offset 300 is stamped 2099-01-01 00:00Z, in the future"), part

    second = p.run(BASE + H)  # its cut would land on offset 300 again: lifted to the log end
    assert second.ok, second.output[-4000:]
    assert f"{p.topic}/0 offset 300 is stamped 2099-01-01T00:00:00+00:00, more than 1 h ahead of now" in second.output
    newest = p.ledger.list_batches(p.name, 1)[0]
    assert [(r.from_offset, r.until_offset) for r in newest.ranges] == [(300, 501)]
    third = p.run(BASE + 2 * H)
    assert third.ok and "nothing new to read" in third.output, third.output[-4000:]
    report = p.check()
    assert report.ok, report.summary()


def test_a_planned_batch_whose_topic_was_deleted_is_refused_before_spark(make_pipeline):
    """The commit dies, leaving batch 1 planned; then its topic is deleted. Every later run used to
    submit batch 1 to Spark again, which could never succeed; the plan task now refuses it at once."""
    p = make_pipeline()
    p.produce(300, start=BASE, hours=1, partitions=2)
    crashed = p.run(BASE, faults="commit.before_transaction")
    crashed.assert_failed_with("injected fault at commit.before_transaction")
    [batch] = p.ledger.list_batches(p.name)
    assert batch.status == "planned"
    _delete_topic(p)

    before = p.snapshot()
    refused = p.run(BASE + H)
    refused.assert_failed_with(f"pipeline {p.name} batch {batch.batch_id} can never run: {p.topic}/0[0,150), "
                               f"{p.topic}/1[0,150) no longer exist(s)")
    assert "no Spark job was submitted" in refused.output
    assert "AirflowFailException" in refused.output and "starting task_id=spark_job" not in refused.output
    assert p.snapshot() == before
