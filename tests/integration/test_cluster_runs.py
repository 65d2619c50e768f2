"""The sample pipeline's hourly runs, unchanged but for its connections, on a Spark standalone
cluster (master + one 2-core worker) and a three-broker Kafka (replication 3, min ISR 2), through
the kill -9 of the partition leaders' broker while a batch's Spark job reads, and of the Spark
worker during the job (issue 17)."""

from __future__ import annotations

import glob
from datetime import datetime, timedelta, timezone

import pytest
from harness import cluster_pipeline, when_writing

pytestmark = pytest.mark.integration
BASE = datetime(2026, 11, 1, tzinfo=timezone.utc)
H = timedelta(hours=1)


def test_hourly_runs_on_the_clusters_through_a_leader_killed_mid_read(make_pipeline, clusters):
    kafka, spark = clusters
    p = cluster_pipeline(make_pipeline, spark, kafka, "")
    produced = p.produce(30_000, start=BASE, hours=3, partitions=2)

    first = p.run(BASE)
    assert first.ok, first.output[-4000:]
    assert f"--master {spark.master_url}" in first.output
    # The master ran the run's application on its worker's executors (not local mode).
    apps = [a for a in spark.status()["completed_apps"] if a["name"].startswith(f"offsetbatch-{p.name}-batch-1")]
    assert apps and apps[0]["cores"] >= 1, spark.status()["completed_apps"]

    killed: list[int] = []

    def kill_leader() -> None:
        leader = kafka.leader_of(p.topic, 0)
        kafka.node(leader).stop(hard=True)
        killed.append(leader)

    watcher = when_writing(p, 2, kill_leader)
    second = p.run(BASE + H)
    watcher.join(timeout=300)
    assert killed, "the job never started writing"
    if not second.ok:  # the run may fail; its rerun must then complete the same batch
        second = p.run(BASE + H)
        assert second.ok, second.output[-4000:]
    # Batch 2's executors lost their connections to the killed node and read on from the new leader.
    batch2 = [a["id"] for a in spark.status()["completed_apps"] if a["name"].startswith(f"offsetbatch-{p.name}-batch-2")]
    executor_logs = "".join(open(f).read() for app in batch2
                            for f in glob.glob(f"{spark.home}/worker-*/work/{app}/*/stderr"))
    assert "disconnected" in executor_logs
    # The broker comes back between runs; the next hour lands on the full cluster.
    kafka.node(killed[0]).start()
    kafka.wait_in_sync(p.topic)
    third = p.run(BASE + 2 * H)
    assert third.ok, third.output[-4000:]

    batches = sorted(p.ledger.list_batches(p.name), key=lambda b: b.batch_id)
    assert [b.status for b in batches] == ["committed"] * 3
    assert [b.batch_id for b in batches] == [1, 2, 3]  # contiguous: no batch lost, none planned twice
    report = p.check()
    assert report.ok, report.summary()
    assert report.rejected_found == len(produced.malformed) > 0


def test_a_worker_killed_mid_job_then_the_rerun_lands_once(make_pipeline, clusters):
    kafka, spark = clusters
    p = cluster_pipeline(make_pipeline, spark, kafka, "_w")
    produced = p.produce(20_000, start=BASE, hours=2, partitions=2)

    killed: list[int | None] = []

    def kill_worker() -> None:
        killed.append(spark.kill_worker(hard=True))  # the worker and its executors, kill -9
        spark.start()  # a replacement worker: without one the job would wait for executors forever

    watcher = when_writing(p, 1, kill_worker)
    first = p.run(BASE)
    watcher.join(timeout=300)
    assert killed and killed[0], "the job never started writing"
    if not first.ok:  # the job may recover on the new worker's executors, or fail and be re-run
        first = p.run(BASE)
        assert first.ok, first.output[-4000:]
    second = p.run(BASE + H)
    assert second.ok, second.output[-4000:]

    batches = sorted(p.ledger.list_batches(p.name), key=lambda b: b.batch_id)
    assert [(b.batch_id, b.status) for b in batches] == [(1, "committed"), (2, "committed")]
    report = p.check()
    assert report.ok, report.summary()
    assert report.rejected_found == len(produced.malformed) > 0
