"""``BatchSparkSubmitOperator``: one spark-submit for the batches a run planned, through the
pipeline's Spark connection, with the cached Kafka connector jars.

It takes the job specs from the plan task's XCom (one batch for scheduled runs; several for a
backfill or replay), gives each execution its own attempt id (its own staging folders, returned as
this task's XCom for the commit), and skips (so the commit is skipped too) when the plan is empty
or every batch is already committed, which makes a cleared or retried run cheap and safe.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from offsetbatch.devstack.artifacts import spark_connector_jars
from offsetbatch.paths import PROJECT_ROOT

JOB = str(PROJECT_ROOT / "jobs" / "offsetbatch_job.py")


class BatchSparkSubmitOperator(SparkSubmitOperator):
    """Run ``jobs/offsetbatch_job.py`` for the batch the upstream plan task returned.

    :param config_path: the pipeline's YAML file (the ledger is checked before submitting)
    :param plan_task_id: task whose XCom holds the plan (``needs_work`` and ``batches``, each with
        ``batch_id`` and ``spec``)
    :param kwargs: everything ``SparkSubmitOperator`` takes (``conn_id``, ``conf``, ...)
    """

    ui_color = "#f4a460"

    def __init__(self, *, config_path: str, plan_task_id: str = "plan", **kwargs: Any) -> None:
        kwargs.setdefault("application", JOB)
        super().__init__(**kwargs)
        self.config_path = config_path
        self.plan_task_id = plan_task_id

    def execute(self, context: Any) -> str:
        import uuid

        from airflow.exceptions import AirflowSkipException

        from offsetbatch.config import load_config
        from offsetbatch.ledger import Ledger

        plan = context["ti"].xcom_pull(task_ids=self.plan_task_id)
        if not plan or not plan.get("needs_work"):
            raise AirflowSkipException(f"nothing to run: plan outcome is {plan and plan.get('outcome')}")
        cfg = load_config(self.config_path)
        ledger = Ledger.for_config(cfg)
        try:
            todo = [ledger.get_batch(cfg.name, b["batch_id"]) for b in plan["batches"]]
            todo = [b for b in todo if b.status == "planned"]
            if not todo:
                raise AirflowSkipException(f"pipeline {cfg.name}: batch(es) {[b['batch_id'] for b in plan['batches']]} "
                                           f"are already committed")
            for b in todo:
                ledger.count_attempt(cfg.name, b.batch_id)
        finally:
            ledger.dispose()
        specs = {b["batch_id"]: b["spec"] for b in plan["batches"]}
        attempt = f"{context['ti'].try_number}-{uuid.uuid4().hex[:12]}"
        for b in todo:
            self.log.info("pipeline %s batch %d (%s%s) attempt %s: submitting Spark job for %d records: %s", cfg.name,
                          b.batch_id, b.kind, f", replaces batch {b.target_batch_id}" if b.target_batch_id else "",
                          attempt, b.records, b.describe_ranges())
        self.application_args = [arg for b in todo for arg in ("--spec", specs[b.batch_id])] + ["--attempt", attempt]
        if not self.jars:
            self.jars = ",".join(spark_connector_jars())
        self.name = f"offsetbatch-{cfg.name}-batch-{'-'.join(str(b.batch_id) for b in todo)}"
        try:
            super().execute(context)
        except Exception:
            # Another run executing the same pending batch may have committed it meanwhile (and
            # cleared this attempt's staging): then this attempt is redundant, not failed.
            ledger = Ledger.for_config(cfg)
            try:
                won = [ledger.get_batch(cfg.name, b.batch_id) for b in todo]
            finally:
                ledger.dispose()
            if all(w.status == "committed" and w.stats.get("committed_attempt") != attempt for w in won):
                raise AirflowSkipException(
                    f"pipeline {cfg.name} batch(es) {[w.batch_id for w in won]} were committed by other attempts "
                    f"(runs {sorted({w.run_id for w in won})}) while attempt {attempt} ran; this attempt's output "
                    f"is discarded"
                ) from None
            raise
        return attempt
