"""The sample pipeline's hourly runs, unchanged but for its connections, on a Spark standalone
cluster (master + one 2-core worker) and a three-broker Kafka (replication 3, min ISR 2), through
the kill -9 of the partition leaders' broker while a batch's Spark job reads (once with the node
down for the following run, once with it back between runs), and of the Spark worker during the
job (issue 17)."""

from __future__ import annotations

import glob
import json
import subprocess
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from harness import cluster_pipeline, when_writing

pytestmark = pytest.mark.integration
BASE = datetime(2026, 11, 1, tzinfo=timezone.utc)
H = timedelta(hours=1)


def _cli_status(p) -> dict:
    res = subprocess.run(["offsetbatch", "--pipelines", str(p.root), "--json", "status", p.name], env=p.env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    [st] = json.loads(res.stdout)
    return st


def _lost_node_in_executor_logs(spark, p, batch_id: int, node) -> bool:
    """Whether the Kafka consumers in the batch's executors logged the loss of a connection to the
    killed broker ``node``: they were reading from it when it died. Kafka's NetworkClient names the
    connection by node id ("Node 3 disconnected.") once the consumer has fetched from it, or, while
    it still bootstraps from that broker, by address ("Bootstrap broker 127.0.0.1:p (id: -1 rack:
    null) disconnected"); which one depends on how far the tasks had read."""
    apps = [a["id"] for a in spark.status()["completed_apps"]
            if a["name"].startswith(f"offsetbatch-{p.name}-batch-{batch_id}")]
    logs = "".join(open(f).read() for app in apps for f in glob.glob(f"{spark.home}/worker-*/work/{app}/*/stderr"))
    return f"] Node {node.node_id} disconnected." in logs or f"] Bootstrap broker {node.bootstrap} (" in logs


def _when_reading(spark, p, batch_id: int, action, timeout_s: float = 300) -> threading.Thread:
    """Once an executor of the batch's application creates its first Kafka reader, run ``action``
    (in a thread). The reader's consumer then loads, bootstraps and fetches (1.2 s and more in the
    executor logs, a new JVM per batch), so a broker killed here dies while the job reads, on a fast
    host or a slow one; it stays the partition's leader in the metadata until the controller fences
    it (broker.session.timeout.ms, 9 s), so the consumer meets it dead. Not at the batch's first
    staged file (``when_writing``): on a loaded 2-core host the tasks started 8 s after it, and a
    consumer that bootstrapped from a live broker after the fencing never met the dead one (CI,
    2026-11-30); nor later: the job takes a partition's 5,000 records of an hour in one 4 MiB fetch
    (``job.read.FETCH_OPTIONS``), and a kill after that fetch meets no consumer."""
    prefix = f"offsetbatch-{p.name}-batch-{batch_id}"

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        app = None
        while time.monotonic() < deadline and app is None:
            app = next((a["id"] for a in spark.status()["active_apps"] if a["name"].startswith(prefix)), None)
            time.sleep(0.2)
        while app and time.monotonic() < deadline:
            if any("KafkaBatchReaderFactory: Creating Kafka reader" in open(f).read()
                   for f in glob.glob(f"{spark.home}/worker-*/work/{app}/*/stderr")):
                action()
                return
            time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def test_hourly_runs_on_the_clusters_through_a_leader_killed_mid_read(make_pipeline, clusters):
    kafka, spark = clusters
    p = cluster_pipeline(make_pipeline, spark, kafka, "")
    produced = p.produce(40_000, start=BASE, hours=4, partitions=2)

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

    # Hour 2: the leader of partition 0 dies while the batch's tasks read; it stays down for the rerun.
    watcher = _when_reading(spark, p, 2, kill_leader)
    second = p.run(BASE + H)
    watcher.join(timeout=300)
    assert killed, "the job never started reading"
    if not second.ok:  # the run may fail; its rerun must then complete the same batch
        second = p.run(BASE + H)
        assert second.ok, second.output[-4000:]
    # Batch 2's executors lost their connections to the killed node and read on from the new leader.
    assert _lost_node_in_executor_logs(spark, p, 2, kafka.node(killed[0]))

    # Hour 3 with that node still down and first in the connection's bootstrap list (kafka-python
    # bootstraps from a random entry): the CLI, the planner and the commit get through the two live
    # brokers.
    dead = kafka.node(killed[0])
    live = [n.bootstrap for n in kafka.nodes if n is not dead]
    p.connect("kafka_cluster", {**kafka.connection_extra(), "bootstrap.servers": ",".join([dead.bootstrap, *live])})
    st = _cli_status(p)
    assert st["kafka_error"] is None
    ends = {po[0]: 0 for po in p.produced}
    for part, offset in p.produced:
        ends[part] = max(ends[part], offset + 1)
    assert {x["partition"]: x["log_end"] for x in st["partitions"]} == ends
    third = p.run(BASE + 2 * H)
    assert third.ok, third.output[-4000:]
    assert dead.pid() is None

    # Hour 4, repeated with the broker coming back between runs: the node rejoins, the (new) leader of
    # partition 0 dies mid-read, and comes back before the next run (or the rerun of a failed one).
    dead.start()
    kafka.wait_in_sync(p.topic)
    killed.clear()
    watcher = _when_reading(spark, p, 4, kill_leader)
    fourth = p.run(BASE + 3 * H)
    watcher.join(timeout=300)
    assert killed, "the job never started reading"
    kafka.node(killed[0]).start()
    kafka.wait_in_sync(p.topic)
    assert _lost_node_in_executor_logs(spark, p, 4, kafka.node(killed[0]))
    if not fourth.ok:
        fourth = p.run(BASE + 3 * H)
        assert fourth.ok, fourth.output[-4000:]
    assert kafka.live_nodes() == {1, 2, 3}

    batches = sorted(p.ledger.list_batches(p.name), key=lambda b: b.batch_id)
    assert [b.status for b in batches] == ["committed"] * 4
    assert [b.batch_id for b in batches] == [1, 2, 3, 4]  # no batch lost, none planned twice
    frontier = {tp.partition: offset for tp, offset in p.ledger.frontier_now(p.name).items()}
    assert frontier == ends  # contiguous to the log end: every range committed once
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
