"""A crash at each boundary of a batch, then a rerun: every record exactly once (docs/architecture.md,
Invariants 4), and no output of an uncommitted batch visible meanwhile (invariant 5).

Faults are injected with OFFSETBATCH_FAULTS (offsetbatch.faults); the Spark case SIGKILLs the
driver while its first Parquet files are being written, here on a Spark standalone master with one
worker (the cluster connection, issue 17: executors in their own JVMs write the staged files); on
``local[2]`` the same kill is part of test_avro_pipeline's and test_secure_kafka's crash suites.
The plan and commit tasks' own crashes, and a crash between a finished job and its commit, run
once, their jobs on the suite's Spark Connect server: where a finished job ran does not change how
its commit recovers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from harness import cluster_pipeline

from offsetbatch.sinks.files import FilesSink, TableLayout

pytestmark = pytest.mark.integration
BASE = datetime(2026, 11, 2, tzinfo=timezone.utc)
H = timedelta(hours=1)


def _committed_first_hour(p):
    p.produce(1000, start=BASE, hours=2)
    first = p.run(BASE)
    assert first.ok, first.output[-4000:]
    return p.snapshot()


def _published(p, batch_id: int) -> bool:
    return Path(TableLayout(p.table).data(batch_id)).exists()


class TestOnTheStandaloneCluster:
    """The crash whose aftermath depends on where the Spark job ran: the driver killed mid-write,
    here with the Spark connection on the standalone master with one worker (issue 17): executors
    in their own JVMs write the staged files, and outlive the driver for a moment. The broker stays
    the suite's (three brokers under failures are test_cluster_runs'). On ``local[2]`` (executors
    die with the driver, partial files stay) the same kill runs in test_avro_pipeline and
    test_secure_kafka, and on S3 in test_object_storage."""

    def test_spark_driver_killed_mid_write_then_rerun(self, make_pipeline, spark_standalone, spark):
        p = cluster_pipeline(make_pipeline, spark_standalone)
        _committed_first_hour(p)
        committed_ids = {r.event_id for r in FilesSink.at(p.table).read_committed(spark).select("event_id").collect()}
        crashed = p.run(BASE + H, faults="job.kill_during_write")
        crashed.assert_failed_with("killing the Spark driver mid-write")
        # the task log says in one line which batch failed, why, and what the next run does
        crashed.assert_failed_with("batch(es) 2 attempt ")
        crashed.assert_failed_with("the Spark job failed (spark-submit was killed by signal 9 (SIGKILL))")
        crashed.assert_failed_with("the next run (or a retry of this task) re-executes batch(es) 2 unchanged")
        layout = TableLayout(p.table)
        # The executor JVM outlives the driver for a moment and may abort its task, which deletes the
        # task's temporary files (seen once in CI): partial files or none, what follows holds.
        assert not list(Path(layout.attempts(2)).rglob("_manifest.json"))
        assert p.ledger.get_batch(p.name, 2).status == "planned"
        assert not _published(p, 2)
        assert p.check().missing  # hour 2 is not visible yet
        # Plain Spark reads of the table see batch 1 only, not the killed attempt's partial files.
        visible = FilesSink.at(p.table).read_committed(spark).select("event_id", "batch_id").collect()
        assert {r.event_id for r in visible} == committed_ids and {r.batch_id for r in visible} == {1}

        rerun = p.run(BASE + H, run_after=crashed.run_after)
        assert rerun.ok, rerun.output[-4000:]
        report = p.check()
        assert report.ok, report.summary()
        assert not Path(layout.attempts(2)).exists(), "the killed attempt's files were cleaned up"


@pytest.mark.spark_connect
class TestCrashesOutsideTheJob:
    """The plan and commit tasks' own crashes: the job had finished (or not begun), so where it ran
    does not change the recovery (a finished job's staged files are files on the table's
    filesystem, whichever JVM wrote them); the jobs run on the suite's Spark Connect server."""

    @pytest.fixture
    def new_pipeline(self, make_pipeline):
        return make_pipeline

    def test_crash_after_planning_then_rerun_of_the_same_run(self, new_pipeline):
        p = new_pipeline()
        _committed_first_hour(p)
        crashed = p.run(BASE + H, faults="plan.after_commit")
        crashed.assert_failed_with("injected fault at plan.after_commit")
        pending = p.ledger.list_batches(p.name, 1)[0]
        assert (pending.batch_id, pending.status) == (2, "planned")
        assert not _published(p, 2)

        rerun = p.run(BASE + H, run_after=crashed.run_after)
        assert rerun.ok, rerun.output[-4000:]
        again = p.ledger.get_batch(p.name, 2)
        assert again.status == "committed" and again.ranges == pending.ranges  # ranges never change after planning
        report = p.check()
        assert report.ok, report.summary()

    def test_crash_inside_the_commit_transaction_rolls_back(self, new_pipeline):
        p = new_pipeline()
        before = _committed_first_hour(p)
        crashed = p.run(BASE + H, faults="commit.in_transaction")
        crashed.assert_failed_with("injected fault at commit.in_transaction")
        assert p.ledger.get_batch(p.name, 2).status == "planned"
        assert p.ledger.frontier_rows(p.name) == before["frontier"]  # the CAS update was rolled back
        assert not _published(p, 2)

        rerun = p.run(BASE + H, run_after=crashed.run_after)
        assert rerun.ok, rerun.output[-4000:]
        report = p.check()
        assert report.ok, report.summary()

    def test_crash_after_commit_before_publish_rolls_forward(self, new_pipeline):
        p = new_pipeline()
        _committed_first_hour(p)
        crashed = p.run(BASE + H, faults="commit.after_transaction")
        crashed.assert_failed_with("injected fault at commit.after_transaction")
        batch = p.ledger.get_batch(p.name, 2)
        assert batch.status == "committed" and batch.stats["published_at"] is None
        assert not _published(p, 2)  # committed but not yet visible: readers never see a half state

        rerun = p.run(BASE + H, run_after=crashed.run_after)
        assert rerun.ok, rerun.output[-4000:]
        assert "was committed but not published; published it now" in rerun.output
        report = p.check()
        assert report.ok, report.summary()

    def test_crash_between_job_and_commit_then_a_new_run_finishes_the_pending_batch(self, new_pipeline):
        p = new_pipeline()
        _committed_first_hour(p)
        crashed = p.run(BASE + H, faults="commit.before_transaction")
        crashed.assert_failed_with("injected fault at commit.before_transaction")
        pending = p.ledger.get_batch(p.name, 2)
        assert pending.status == "planned" and not _published(p, 2)

        p.produce(500, start=BASE + 2 * H, hours=1)
        later = p.run(BASE + 2 * H)  # a different Airflow run: executes the pending batch first, unchanged
        assert later.ok, later.output[-4000:]
        assert "not committed; run" in later.output
        done = p.ledger.get_batch(p.name, 2)
        assert done.status == "committed" and done.ranges == pending.ranges and done.run_id == pending.run_id
        nxt = p.run(BASE + 2 * H)  # then the next run reads the rest
        assert nxt.ok, nxt.output[-4000:]
        report = p.check()
        assert report.ok, report.summary()
