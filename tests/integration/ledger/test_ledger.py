"""The ledger on SQLite and on a real PostgreSQL: schema versioning, compare-and-set commits,
the per-pipeline lock, and the planner's idempotence against the real broker."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa

from offsetbatch.config import PipelineConfig
from offsetbatch.ledger import Ledger, LedgerLockTimeout, StaleCommitError
from offsetbatch.ledger.schema import LATEST, ranges, schema_version
from offsetbatch.model import OffsetRange, TopicPartition
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan.planner import RunInfo, plan_for_run
from offsetbatch.source.admin import KafkaAdmin
from offsetbatch_dev.sample.producer import produce

pytestmark = pytest.mark.integration


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger(request, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/ledger.db"
    else:
        url = request.getfixturevalue("postgres").create_database(f"ledger_{uuid.uuid4().hex[:8]}")
    led = Ledger(url, create=True)
    yield led
    led.dispose()


def _plan_one(ledger: Ledger, pipeline: str = "p", until: int = 100) -> None:
    tp = TopicPartition("t", 0)
    with ledger.lock(pipeline) as conn:
        ledger.start_partitions(conn, pipeline, {tp: 0}, "earliest")
        ledger.insert_batch(conn, pipeline, "incremental", [OffsetRange("t", 0, 0, until, frontier_before=0)],
                            dag_id="d", run_id="r1", interval=(None, None), output_path="/x")


def test_schema_is_versioned_and_migration_is_idempotent(ledger):
    Ledger(ledger.url).dispose()  # a second migrator changes nothing
    with ledger.engine.connect() as conn:
        assert conn.execute(sa.select(schema_version.c.version)).scalars().all() == list(range(1, LATEST + 1))


def test_commit_advances_the_frontier_by_compare_and_set(ledger):
    _plan_one(ledger)
    batch = ledger.get_batch("p", 1)
    with ledger.lock("p") as conn:
        ledger.commit_batch(conn, batch, {"rows_in": 100, "committed_attempt": "a"}, {TopicPartition("t", 0): {"rows": 100}})
    assert ledger.frontier_now("p") == {TopicPartition("t", 0): 100}
    assert ledger.get_batch("p", 1).status == "committed"


def test_a_stale_commit_fails_clearly_and_changes_nothing(ledger):
    _plan_one(ledger)
    batch = ledger.get_batch("p", 1)
    with ledger.engine.begin() as conn:  # someone else moved the frontier meanwhile
        conn.execute(sa.text("UPDATE ob_frontier SET next_offset = 40 WHERE pipeline = 'p'"))
    with pytest.raises(StaleCommitError, match=r"batch 1 was planned from offset 0 of t/0, but the frontier is now 40"):
        with ledger.lock("p") as conn:
            ledger.commit_batch(conn, batch, {"rows_in": 100}, {})
    assert ledger.get_batch("p", 1).status == "planned"
    assert ledger.frontier_now("p") == {TopicPartition("t", 0): 40}


def test_a_commit_that_waited_for_the_lock_finds_the_batch_committed_by_the_other_run(ledger, tmp_path, monkeypatch):
    """Two runs executing one pending batch (a resumed batch, a replay joined by a second trigger):
    both read it 'planned'; the one that gets the lock second succeeds as already committed, writes
    nothing and discards its own attempt's output."""
    from offsetbatch import faults
    from offsetbatch.commit import protocol as commit
    from offsetbatch.config import load_config
    from offsetbatch.jobspec import Manifest, RangeReport
    from offsetbatch.sinks import sink_for

    _plan_one(ledger)
    path = tmp_path / "p.yaml"
    path.write_text(f"name: p\nkafka: {{topics: [t]}}\nsink: {{path: {tmp_path / 'table'}}}\nledger: {{url: '{ledger.url}'}}\n")
    cfg = load_config(path)
    staging = sink_for(cfg.name, cfg.sink).staging
    for attempt in ("a", "b"):
        data = Path(staging.attempt(1, attempt)) / "data"
        data.mkdir(parents=True)
        (data / "part-0.parquet").write_text(attempt)
        Manifest("p", 1, [RangeReport("t", 0, 0, 100, 100, 0)], 100, 100, 0, 1000, [], [], 1.0, "4.3.0",
                 attempt).save(staging.staging_manifest(1, attempt))

    real = faults.checkpoint
    def a_commits_first(point: str) -> None:  # run b is past its own status check, not yet in the lock
        if point == "commit.before_transaction" and ledger.get_batch("p", 1).status == "planned":
            monkeypatch.setattr(faults, "checkpoint", real)
            assert commit.commit_batch(Pipeline(cfg), ledger, 1, "a").outcome == "committed"
        real(point)

    monkeypatch.setattr(faults, "checkpoint", a_commits_first)
    events_before = len(ledger.list_events("p"))
    late = commit.commit_batch(Pipeline(cfg), ledger, 1, "b")
    assert late.outcome == "already_committed"
    batch = ledger.get_batch("p", 1)
    assert (batch.status, batch.stats["committed_attempt"]) == ("committed", "a")
    assert ledger.frontier_now("p") == {TopicPartition("t", 0): 100}
    added = ledger.list_events("p")
    assert [e["kind"] for e in added[: len(added) - events_before]].count("batch_committed") == 1
    assert not Path(staging.attempt(1, "b")).exists()


def test_a_many_partition_commit_checks_every_partition_and_writes_every_range_stat(ledger):
    """The bulk commit (one statement per table) refuses when any single partition moved, and
    otherwise sets every frontier and every range's stats."""
    tps = [TopicPartition(f"t{i % 3}", i) for i in range(300)]
    stale = TopicPartition("t1", 250)
    with ledger.lock("p") as conn:
        ledger.start_partitions(conn, "p", {tp: 10 for tp in tps}, "earliest")
        ledger.insert_batch(conn, "p", "incremental",
                            [OffsetRange(tp.topic, tp.partition, 10, 20 + i, frontier_before=10) for i, tp in enumerate(tps)],
                            dag_id="d", run_id="r1", interval=(None, None), output_path="/x")
    started = [e for e in ledger.list_events("p", 1000) if e["kind"] == "partition_started"]  # one bulk INSERT each
    assert sorted((e["detail"]["topic"], e["detail"]["partition"], e["detail"]["offset"]) for e in started) == \
        sorted((tp.topic, tp.partition, 10) for tp in tps)
    batch = ledger.get_batch("p", 1)
    stats = {tp: {"rows": i, "rejected": i % 2} for i, tp in enumerate(tps)}
    with ledger.engine.begin() as conn:
        conn.execute(sa.text("UPDATE ob_frontier SET next_offset = 11 WHERE pipeline = 'p' AND topic = 't1' AND partition = 250"))
    with pytest.raises(StaleCommitError, match=r"planned from offset 10 of t1/250, but the frontier is now 11"):
        with ledger.lock("p") as conn:
            ledger.commit_batch(conn, batch, {"rows_in": 1}, stats)
    assert ledger.frontier_now("p") == {tp: 11 if tp == stale else 10 for tp in tps}
    assert ledger.get_batch("p", 1).status == "planned"

    with ledger.engine.begin() as conn:
        conn.execute(sa.text("UPDATE ob_frontier SET next_offset = 10 WHERE pipeline = 'p' AND topic = 't1' AND partition = 250"))
    with ledger.lock("p") as conn:
        ledger.commit_batch(conn, batch, {"rows_in": 1}, stats)
    assert ledger.frontier_now("p") == {tp: 20 + i for i, tp in enumerate(tps)}
    assert {r["batch_id"] for r in ledger.frontier_rows("p")} == {1}
    with ledger.reading() as conn:
        rows = conn.execute(sa.select(ranges.c.topic, ranges.c.partition, ranges.c.rows_read, ranges.c.rows_rejected)
                            .where(ranges.c.pipeline == "p")).all()
    assert {TopicPartition(r.topic, r.partition): (r.rows_read, r.rows_rejected) for r in rows} == \
        {tp: (s["rows"], s["rejected"]) for tp, s in stats.items()}


def test_the_pipeline_lock_serializes_and_times_out_with_a_clear_message(ledger):
    ledger.frontier_now("p")
    held, release = threading.Event(), threading.Event()

    def holder():
        with ledger.lock("p") as conn:
            ledger.event(conn, "p", "holder")
            held.set()
            release.wait(30)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(10)
    with pytest.raises(LedgerLockTimeout, match="pipeline p: another run held the ledger lock"):
        with ledger.lock("p", timeout_s=1):
            pass
    waited: list[float] = []

    def waiter():
        t0 = time.monotonic()
        with ledger.lock("p") as conn:
            waited.append(time.monotonic() - t0)
            ledger.event(conn, "p", "waiter")

    w = threading.Thread(target=waiter)
    w.start()
    time.sleep(0.5)
    release.set()
    t.join(10)
    w.join(30)
    assert waited and waited[0] >= 0.4
    kinds = [e["kind"] for e in reversed(ledger.list_events("p"))]
    assert kinds == ["holder", "waiter"]


@pytest.fixture
def topic(kafka_broker):
    name = f"ledger-{uuid.uuid4().hex[:8]}"
    produce(kafka_broker.bootstrap, name, 400, partitions=2, hours=1, malformed_fraction=0, progress=False)
    return name


def _cfg(topic: str, url: str) -> PipelineConfig:
    return PipelineConfig(name="planner_test", kafka={"topics": [topic]}, sink={"path": "/tmp/unused"},
                          ledger={"url": url}, caps={"max_records_per_partition": 150})


def test_planning_is_idempotent_per_run_and_resumes_pending_batches(ledger, kafka_broker, topic):
    cfg = _cfg(topic, ledger.url)
    with KafkaAdmin(kafka_broker.bootstrap) as kafka:
        first = plan_for_run(Pipeline(cfg), ledger, kafka, RunInfo("d", "run-1"))
        again = plan_for_run(Pipeline(cfg), ledger, kafka, RunInfo("d", "run-1"))
        other = plan_for_run(Pipeline(cfg), ledger, kafka, RunInfo("d", "run-2"))
    assert first.outcome == "new" and [str(r) for r in first.batch.ranges] == [f"{topic}/0[0,150)", f"{topic}/1[0,150)"]
    assert again.outcome == "same_run" and again.batch.ranges == first.batch.ranges
    assert other.outcome == "pending" and other.batch.batch_id == first.batch.batch_id


def test_a_timestamp_starting_policy_starts_new_partitions_at_that_time(ledger, kafka_broker):
    from datetime import datetime, timedelta, timezone

    name = f"ledger-ts-{uuid.uuid4().hex[:8]}"
    base = datetime(2026, 10, 1, tzinfo=timezone.utc)
    # 400 records, one every 9 s over partitions 0/1: the first at or after base+30min is record 200,
    # offset 100 of each partition.
    produce(kafka_broker.bootstrap, name, 400, partitions=2, start=base, hours=1, malformed_fraction=0, progress=False)
    cfg = PipelineConfig(name="ts_policy", kafka={"topics": [name]}, sink={"path": "/tmp/unused"},
                         ledger={"url": ledger.url}, starting_policy=(base + timedelta(minutes=30)).isoformat())
    with KafkaAdmin(kafka_broker.bootstrap) as kafka:
        result = plan_for_run(Pipeline(cfg), ledger, kafka, RunInfo("d", "run-1"))
    assert [str(r) for r in result.batch.ranges] == [f"{name}/0[100,200)", f"{name}/1[100,200)"]
    assert [row["start_offset"] for row in ledger.frontier_rows("ts_policy")] == [100, 100]


def test_concurrent_planners_create_exactly_one_batch(ledger, kafka_broker, topic):
    cfg = _cfg(topic, ledger.url)

    def plan(i: int):
        with KafkaAdmin(kafka_broker.bootstrap) as kafka:
            return plan_for_run(Pipeline(cfg), ledger, kafka, RunInfo("d", f"run-{i}"))

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(plan, range(8)))
    assert sorted(r.outcome for r in results) == ["new"] + ["pending"] * 7
    assert {r.batch.batch_id for r in results} == {1}
    assert len(ledger.list_batches(cfg.name)) == 1


def test_a_read_only_ledger_is_one_clear_refusal_without_retries(postgres):
    """A ledger database that refuses writes (here PostgreSQL's default_transaction_read_only, as on a
    read replica): reads work, and the first write is a LedgerReadOnlyError naming the pipeline and
    the ledger, which the tasks fail at once instead of retrying the driver's raw error."""
    from offsetbatch.dag.retry_policy import is_permanent
    from offsetbatch.ledger import LedgerReadOnlyError

    name = f"ledger_ro_{uuid.uuid4().hex[:8]}"
    url = postgres.create_database(name)
    with Ledger(url, create=True) as ledger:
        with ledger.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
    with Ledger(url) as ledger:
        assert ledger.committed_ids("orders") == set()
        with pytest.raises(LedgerReadOnlyError, match=r"pipeline orders: the ledger at postgresql.* cannot be written "
                                                      r"\(.*read-only transaction.*\); nothing was changed") as refused:
            with ledger.lock("orders"):
                pass
    assert is_permanent(refused.value)
