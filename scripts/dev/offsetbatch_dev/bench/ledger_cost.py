"""Planning and commit cost as partitions grow (10, 100, 1,000 across topics), on SQLite and
PostgreSQL: the planner's wall time with its broker round trips, and the commit transaction
(lock, compare-and-set of every partition's frontier, range stats, batch row, COMMIT)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml
from kafka import KafkaProducer

from offsetbatch.config import load_config
from offsetbatch.ledger import Ledger
from offsetbatch.model import TopicPartition
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan.planner import RunInfo, plan_for_run
from offsetbatch.source.admin import KafkaAdmin
from offsetbatch_dev.sample.producer import ensure_topic

RECORDS_PER_PARTITION = 5


@dataclass
class Cost:
    partitions: int
    backend: str
    first_plan: float  # new partitions pinned by the starting policy, then planned
    plan: float  # steady state: frontier known, broker asked for earliest/latest/time cut
    commit: float
    next_plan: float | None = None  # steady state with a new record in every partition: a full batch


def layout(partitions: int) -> list[tuple[str, int]]:
    """(topic, partitions) splitting ``partitions`` across topics: 1x10, 4x25, 10x100."""
    topics = {10: 1, 100: 4, 1000: 10}.get(partitions, max(1, partitions // 100))
    return [(f"bench-parts-{partitions}-{i}", partitions // topics) for i in range(topics)]


def ensure_topics(bootstrap: str, partitions: int) -> list[str]:
    """Topics with a few records in every partition (created and filled once)."""
    topics = layout(partitions)
    with KafkaAdmin(bootstrap) as kafka:
        have = kafka.partitions([t for t, _ in topics])
        filled = kafka.offsets(have) if len(have) == partitions else {}
    if filled and all(po.latest >= RECORDS_PER_PARTITION for po in filled.values()):
        return [t for t, _ in topics]
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20)
    for topic, n in topics:
        ensure_topic(bootstrap, topic, n)
        for p in range(n):
            for i in range(RECORDS_PER_PARTITION):
                producer.send(topic, value=b'{"i":%d}' % i, partition=p)
    producer.flush()
    producer.close()
    return [t for t, _ in topics]


def _config(work: Path, topics: list[str], ledger_url: str, bootstrap_conn: str):
    path = work / f"cost-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump({
        "name": "bench_cost", "kafka": {"conn_id": bootstrap_conn, "topics": topics}, "starting_policy": "earliest",
        "sink": {"path": str(work / "cost-table")}, "ledger": {"url": ledger_url},
    }))
    return load_config(path)


def produce_one_each(bootstrap: str, partitions: int) -> None:
    """One more record in every partition of the layout's topics."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20)
    for topic, n in layout(partitions):
        for p in range(n):
            producer.send(topic, value=b'{"i":-1}', partition=p)
    producer.flush()
    producer.close()


def measure(bootstrap: str, partitions: int, backend: str, ledger_url: str, work: Path, conn_id: str,
            next_batch: bool = False) -> Cost:
    """``next_batch``: also time the plan of the batch after (one new record in every partition)."""
    topics = ensure_topics(bootstrap, partitions)
    cfg = _config(work, topics, ledger_url, conn_id)
    ledger = Ledger(ledger_url, create=True)
    try:
        with KafkaAdmin(bootstrap) as kafka:
            run = RunInfo("bench", f"first-{uuid.uuid4().hex[:6]}")
            t0 = time.perf_counter()
            first = plan_for_run(Pipeline(cfg), ledger, kafka, run)
            first_plan = time.perf_counter() - t0
            batch = first.batch
            assert batch is not None and len(batch.ranges) == partitions, "every partition has records to plan"
            stats = {TopicPartition(r.topic, r.partition): {"rows": r.size, "rejected": 0} for r in batch.ranges}
            t0 = time.perf_counter()
            with ledger.lock(cfg.name) as conn:
                ledger.commit_batch(conn, batch, {"rows_in": batch.records, "rows_out": batch.records,
                                                  "rows_rejected": 0, "committed_attempt": "bench"}, stats)
            commit = time.perf_counter() - t0
            t0 = time.perf_counter()
            steady = plan_for_run(Pipeline(cfg), ledger, kafka, RunInfo("bench", f"next-{uuid.uuid4().hex[:6]}"))
            plan = time.perf_counter() - t0
            assert steady.outcome == "empty"
            next_plan = None
            if next_batch:
                produce_one_each(bootstrap, partitions)
                t0 = time.perf_counter()
                nxt = plan_for_run(Pipeline(cfg), ledger, kafka, RunInfo("bench", f"then-{uuid.uuid4().hex[:6]}"))
                next_plan = time.perf_counter() - t0
                assert nxt.batch is not None and len(nxt.batch.ranges) == partitions, "a range in every partition"
    finally:
        ledger.dispose()
    return Cost(partitions, backend, first_plan, plan, commit, next_plan)
