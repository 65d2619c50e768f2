"""``BatchSparkSubmitOperator``: spark-submit of one planned batch through the pipeline's Spark
connection, with the cached Kafka connector jars.

It takes the job spec from the plan task's XCom, gives each execution its own attempt id (its own
staging folder, returned as this task's XCom for the commit), and skips (so the commit is skipped
too) when the plan is empty or the batch is already committed, which makes a cleared or retried run
cheap and safe.
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
    :param plan_task_id: task whose XCom holds the plan (``spec``, ``batch_id``, ``needs_work``)
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
            batch = ledger.get_batch(cfg.name, plan["batch_id"])
            if batch.status == "committed":
                raise AirflowSkipException(f"pipeline {cfg.name} batch {batch.batch_id} is already committed")
            ledger.count_attempt(cfg.name, batch.batch_id)
        finally:
            ledger.dispose()
        attempt = f"{context['ti'].try_number}-{uuid.uuid4().hex[:12]}"
        self.log.info("pipeline %s batch %d attempt %s: submitting Spark job for %d records: %s", cfg.name,
                      batch.batch_id, attempt, batch.records, batch.describe_ranges())
        self.application_args = ["--spec", plan["spec"], "--attempt", attempt]
        if not self.jars:
            self.jars = ",".join(spark_connector_jars())
        self.name = f"offsetbatch-{cfg.name}-batch-{batch.batch_id}"
        try:
            super().execute(context)
        except Exception:
            # Another run executing the same pending batch may have committed it meanwhile (and
            # cleared this attempt's staging): then this attempt is redundant, not failed.
            ledger = Ledger.for_config(cfg)
            try:
                won = ledger.get_batch(cfg.name, batch.batch_id)
            finally:
                ledger.dispose()
            if won.status == "committed" and won.stats.get("committed_attempt") != attempt:
                raise AirflowSkipException(
                    f"pipeline {cfg.name} batch {batch.batch_id} was committed by attempt "
                    f"{won.stats.get('committed_attempt')} (run {won.run_id}) while attempt {attempt} ran; "
                    f"this attempt's output is discarded"
                ) from None
            raise
        return attempt
