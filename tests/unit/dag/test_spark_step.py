"""The spark_job task's logic (``offsetbatch.dag.tasks``), on a real SQLite ledger: what it submits,
when it has nothing to run, and when a failed submission was only a redundant attempt. The
operator around it only submits; ``airflow dags test`` runs cover it in the integration suite."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from offsetbatch.config import load_config
from offsetbatch.dag.tasks import NothingToRun, spark_redundant, spark_submission
from offsetbatch.model import OffsetRange, TopicPartition
from offsetbatch.pipeline import Pipeline

TP = TopicPartition("t", 0)


@pytest.fixture
def cfg(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "kafka": {"topics": ["t"]}, "value": {"format": "raw"},
                                    "sink": {"path": str(tmp_path / "table")},
                                    "ledger": {"url": f"sqlite:///{tmp_path}/ledger.db"}}))
    return load_config(path)


def _plan(cfg, *ranges):
    """Batches as the plan task leaves them: planned in the ledger, listed in its XCom."""
    out = []
    with Pipeline(cfg).ledger(create=True) as ledger:
        with ledger.lock("p") as conn:
            if not ledger.frontier(conn, "p"):
                ledger.start_partitions(conn, "p", {TP: 0}, "earliest")
        for a, b in ranges:
            with ledger.lock("p") as conn:
                batch = ledger.insert_batch(conn, "p", "incremental", [OffsetRange("t", 0, a, b, a)], dag_id="d",
                                            run_id=f"r{a}", interval=(None, None), output_path=cfg.sink.path)
            out.append({"batch_id": batch.batch_id, "spec": f"/specs/{batch.batch_id}.json"})
    return {"needs_work": True, "outcome": "new", "batches": out}


def _commit(cfg, batch_id: int, attempt: str) -> None:
    with Pipeline(cfg).ledger() as ledger, ledger.lock("p") as conn:
        ledger.commit_batch(conn, ledger.get_batch("p", batch_id, conn), {"committed_attempt": attempt}, {})


def test_submits_every_planned_batch_under_one_attempt_and_counts_it(cfg):
    plan = _plan(cfg, (0, 10), (10, 20))
    sub = spark_submission(Pipeline(cfg), plan, try_number=2)
    assert [b.batch_id for b in sub.batches] == [1, 2]
    assert sub.attempt.startswith("2-")
    assert sub.application_args == ["--spec", "/specs/1.json", "--spec", "/specs/2.json", "--attempt", sub.attempt]
    assert sub.name == "offsetbatch-p-batch-1-2"
    with Pipeline(cfg).ledger() as ledger:
        assert [ledger.get_batch("p", i).stats["attempts"] for i in (1, 2)] == [1, 1]


def test_committed_batches_are_left_out_and_an_empty_plan_runs_nothing(cfg):
    plan = _plan(cfg, (0, 10), (10, 20))
    _commit(cfg, 1, "x")
    assert [b.batch_id for b in spark_submission(Pipeline(cfg), plan, 1).batches] == [2]
    _commit(cfg, 2, "y")
    with pytest.raises(NothingToRun, match=r"batch 1 is already committed; batch 2 is already committed"):
        spark_submission(Pipeline(cfg), plan, 1)
    with pytest.raises(NothingToRun, match="plan outcome is empty"):
        spark_submission(Pipeline(cfg), {"needs_work": False, "outcome": "empty", "batches": []}, 1)


def test_a_batch_abandoned_by_a_reset_meanwhile_is_not_called_committed(cfg):
    """A run whose planned batch an operator's ``reset --apply`` abandoned while it waited used to
    say the batch was "already committed" (issue 41, case 15)."""
    plan = _plan(cfg, (0, 10))
    with Pipeline(cfg).ledger() as ledger, ledger.lock("p") as conn:
        ledger.set_status(conn, "p", [1], "abandoned", from_status="planned")
    with pytest.raises(NothingToRun) as info:
        spark_submission(Pipeline(cfg), plan, 1)
    assert "batch 1 was abandoned meanwhile (an operator's reset or replay; 'offsetbatch batch p 1' shows" in str(info.value)
    assert "committed" not in str(info.value)


def test_a_failure_is_redundant_only_when_other_attempts_committed_every_batch(cfg):
    sub = spark_submission(Pipeline(cfg), _plan(cfg, (0, 10), (10, 20)), 1)
    assert spark_redundant(Pipeline(cfg), sub) is None  # nothing committed: the failure stands
    _commit(cfg, 1, "other")
    assert spark_redundant(Pipeline(cfg), sub) is None  # batch 2 is still this attempt's job
    _commit(cfg, 2, sub.attempt)
    assert spark_redundant(Pipeline(cfg), sub) is None  # this very attempt committed one: not redundant
    sub2 = spark_submission(Pipeline(cfg), _plan(cfg, (20, 30)), 1)
    _commit(cfg, 3, "winner")
    # what the losing job wrote before it failed, and its error file, stay nowhere (issue 41, case 3)
    staging = Pipeline(cfg).sink.staging
    lost = Path(staging.attempt(3, sub2.attempt))
    (lost / "data").mkdir(parents=True)
    (lost / "data" / "part-00000.parquet").write_bytes(b"PAR1")
    (lost / "_error.json").write_text("{}")
    assert "were committed by other attempts" in spark_redundant(Pipeline(cfg), sub2)
    assert not lost.exists()


def test_a_second_replay_of_a_batch_joins_the_pending_one(cfg):
    """Two runs replaying batch 1 at once (a backfill and a manual replay): the second executes the
    first's pending replay batch instead of planning another one on top of it."""
    from offsetbatch.plan.planner import RunInfo, plan_for_run
    from offsetbatch.plan.request import RunRequest

    _plan(cfg, (0, 10))
    _commit(cfg, 1, "a")
    with Pipeline(cfg).ledger() as ledger:
        replay = RunRequest("replay", batch_ids=(1,))
        first = plan_for_run(Pipeline(cfg), ledger, None, RunInfo("d", "manual__1", request=replay, run_type="manual"))
        second = plan_for_run(Pipeline(cfg), ledger, None, RunInfo("d", "backfill__1", request=replay, run_type="backfill"))
        assert [b.batch_id for b in first.batches] == [b.batch_id for b in second.batches] == [2]
        assert second.needs_work and ledger.get_batch("p", 2).target_batch_id == 1
        assert ledger.get_batch("p", 2).stats["run_type"] == "manual"
        _commit(cfg, 2, "x")
        third = plan_for_run(Pipeline(cfg), ledger, None, RunInfo("d", "manual__3", request=replay))
        assert [b.batch_id for b in third.batches] == [3]  # once committed, a new replay is a new batch


def test_a_failed_spark_step_is_one_line_naming_batch_ranges_cause_and_next_step(cfg):
    from offsetbatch import storage
    from offsetbatch.dag.tasks import spark_failure
    from offsetbatch.sinks import sink_for

    sub = spark_submission(Pipeline(cfg), _plan(cfg, (0, 10)), 1)
    killed = spark_failure(Pipeline(cfg), sub, RuntimeError("Cannot execute: spark-submit --master local[*] …. Error code is: -9."))
    assert killed == (f"pipeline p batch(es) 1 attempt {sub.attempt}: the Spark job failed (spark-submit was killed by "
                      f"signal 9 (SIGKILL)). Ranges: batch 1: t/0[0,10). Nothing was committed; the next run (or a "
                      f"retry of this task) re-executes batch(es) 1 unchanged.")
    storage.write_json(sink_for("p", cfg.sink).staging.job_error(1, sub.attempt),
                       {"error": "KafkaException: Timeout of 30000ms expired before the position for partition t-0"})
    line = spark_failure(Pipeline(cfg), sub, RuntimeError("Cannot execute: spark-submit …. Error code is: 1."))
    assert "(spark-submit exited with code 1; the job's last error: KafkaException: Timeout of 30000ms" in line
    assert "\n" not in line


@pytest.mark.parametrize("types, permanent", [
    (["SchemaIncompatibleError", "PipelineError", "OffsetbatchError"], True),
    (["TransformAnalysisError", "ConfigError", "OffsetbatchError"], True),
    ([], False),  # a Kafka timeout, a killed driver: a retry may succeed
])
def test_a_job_error_no_retry_fixes_fails_the_task_at_once(cfg, types, permanent):
    """Issue 41, case 15: job-side permanent failures cost two spark-submits; now the first fails the
    task without its retries, by the error classes the job left in its attempt's error file."""
    import logging

    from airflow.sdk.exceptions import AirflowFailException

    from offsetbatch import storage
    from offsetbatch.dag.operators.spark_step import failure_explained
    from offsetbatch.sinks import sink_for

    sub = spark_submission(Pipeline(cfg), _plan(cfg, (0, 10)), 1)
    storage.write_json(sink_for("p", cfg.sink).staging.job_error(1, sub.attempt), {"error": "x: y", "types": types})
    failed = RuntimeError("Cannot execute: spark-submit …. Error code is: 1.")
    with pytest.raises(AirflowFailException if permanent else RuntimeError) as raised:
        with failure_explained(Pipeline(cfg), sub, logging.getLogger("test")):
            raise failed
    if permanent:
        assert "No retry fixes this error" in str(raised.value) and "the job's last error: x: y" in str(raised.value)
    else:
        assert raised.value is failed


@pytest.mark.parametrize("mode", ["cluster", "client"])
def test_cluster_deploy_mode_is_refused_before_an_attempt_is_counted(cfg, mode, monkeypatch):
    """Issue 54: a driver started by ``--deploy-mode cluster`` runs on another host than the worker
    that wrote the job's secrets file. The task fails at once (no retry fixes a connection), naming
    the connection and the two ways out, and the ledger counts no attempt."""
    import json

    from airflow.sdk.exceptions import AirflowFailException

    from offsetbatch.dag.operators.spark_submit import BatchSparkSubmitOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTERED", json.dumps(
        {"conn_type": "spark", "host": "spark://spark-master", "port": 7077, "extra": {"deploy-mode": mode}}))
    plan = _plan(cfg, (0, 10))
    op = BatchSparkSubmitOperator(task_id="spark_job", config_path=str(cfg.source_file), conn_id="spark_clustered")

    class TI:
        try_number = 1

        def xcom_pull(self, task_ids):
            return plan

    if mode == "cluster":
        with pytest.raises(AirflowFailException) as err:
            op.execute({"ti": TI()})
        assert "'spark_clustered'" in str(err.value) and "spark://spark-master:7077" in str(err.value)
        assert "'deploy-mode' to 'client'" in str(err.value) and "Spark Connect" in str(err.value)
    else:
        op._refuse_cluster_mode()  # client mode goes on to submit (the integration suite runs it)
        assert op._hook is None, "the hook that submits is built later, with the job's arguments"
    with Pipeline(cfg).ledger() as ledger:
        assert ledger.get_batch("p", 1).stats.get("attempts", 0) == 0
