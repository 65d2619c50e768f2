"""The sample pipeline's hourly runs, unchanged but for its connections, on a Spark standalone
cluster (master + one 2-core worker) and a three-broker Kafka (replication 3, min ISR 2), through
the kill -9 of the partition leaders' broker while a batch's Spark job reads, and of the Spark
worker during the job (issue 17)."""

from __future__ import annotations

import glob
import json
import threading
from datetime import datetime, timedelta, timezone

import pytest
from harness import worker_port

from offsetbatch.dev.stack.kafka_cluster import KafkaCluster
from offsetbatch.dev.stack.spark_cluster import SparkCluster

pytestmark = pytest.mark.integration
BASE = datetime(2026, 11, 1, tzinfo=timezone.utc)
H = timedelta(hours=1)


@pytest.fixture(scope="module")
def clusters(test_state):
    kafka = KafkaCluster(port=worker_port(39192), home=test_state / "cluster-runs-kafka")
    spark = SparkCluster(port=worker_port(27077), ui_port=worker_port(27180), workers=1, cores=2, memory="1g",
                         home=test_state / "cluster-runs-spark")
    kafka.wipe()
    kafka.start()
    spark.start()
    yield kafka, spark
    spark.stop()
    kafka.wipe()


def _when_writing(p, batch_id: int, action) -> threading.Thread:
    """Once the batch's job writes its first staged file, run ``action`` (in a thread)."""
    pattern = f"{p.table}/_offsetbatch/staging/batch_id={batch_id}/attempt=*/data/_temporary"

    def watch() -> None:
        import time

        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not glob.glob(pattern):
            time.sleep(0.05)
        if glob.glob(pattern):
            action()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def _cluster_pipeline(make_pipeline, kafka: KafkaCluster, spark: SparkCluster, suffix: str = ""):
    """The sample pipeline with its Kafka and Spark connections on the clusters: nothing else differs.
    500 records per Spark task: a 10,000-record batch is 20 tasks on the worker's 2 cores, so when
    its first file appears most of its tasks have yet to read their slice from Kafka."""
    p = make_pipeline(suffix, spark={"conn_id": "spark_cluster", "records_per_task": 500,
                                     "conf": {"spark.executor.memory": "512m", "spark.driver.host": "127.0.0.1",
                                              "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false",
                                              "spark.sql.shuffle.partitions": "2"}})
    p.env = {**p.env, "AIRFLOW_CONN_SPARK_CLUSTER": json.dumps(spark.airflow_connection())}
    p.connect("kafka_cluster", kafka.connection_extra())
    p.bootstrap = kafka.bootstrap
    kafka.create_topic(p.topic, 2)
    return p


def test_hourly_runs_on_the_clusters_through_a_leader_killed_mid_read(make_pipeline, clusters):
    kafka, spark = clusters
    p = _cluster_pipeline(make_pipeline, kafka, spark)
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

    watcher = _when_writing(p, 2, kill_leader)
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
    p = _cluster_pipeline(make_pipeline, kafka, spark, "_w")
    produced = p.produce(20_000, start=BASE, hours=2, partitions=2)

    killed: list[int | None] = []

    def kill_worker() -> None:
        killed.append(spark.kill_worker(hard=True))  # the worker and its executors, kill -9
        spark.start()  # a replacement worker: without one the job would wait for executors forever

    watcher = _when_writing(p, 1, kill_worker)
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
