"""The plan and commit tasks as operators of their own (they were TaskFlow ``@task`` functions):
an operator can answer Airflow's OpenLineage provider (``BatchLineage``), a decorated function
cannot. Each re-reads the pipeline file, so a run uses today's config."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator

from offsetbatch.dag.operators.lineage import BatchLineage
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan.request import check_keys


class PlanOperator(BatchLineage, BaseOperator):
    """Plan (or find) this run's batches and write their job specs; returns the plan (XCom).

    :param config_path: the pipeline's YAML file
    """

    ui_color = "#e0f2fe"
    lineage_outputs = False

    def __init__(self, *, config_path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path

    def execute(self, context: Any) -> dict:
        self.lineage_plan = run_plan(self.config_path, context)
        return self.lineage_plan


class CommitOperator(BatchLineage, BaseOperator):
    """Commit the batches the plan returned from the attempt the spark_job task returned; the
    result goes on the asset event (this operator's outlet) and XCom.

    :param config_path: the pipeline's YAML file
    """

    ui_color = "#dcfce7"

    def __init__(self, *, config_path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path

    def execute(self, context: Any) -> dict:
        planned = self.remember_plan(context)
        self.lineage_result = run_commit(self.config_path, self.outlets[0], planned, context)
        return self.lineage_result


def run_plan(cfg_path: str, ctx: Any) -> dict:
    """The plan task: the trigger's keys as the user sent them, then ``tasks.plan_step``."""
    from offsetbatch.dag.input_asset import fired_by, input_asset_uri
    from offsetbatch.dag.retry_policy import fail_without_retry
    from offsetbatch.dag.tasks import plan_step

    dag_run = ctx["dag_run"]
    with fail_without_retry():  # a refused value or bad config fails every attempt alike
        pipeline = Pipeline.load(cfg_path)
        check_keys(pipeline.name, getattr(dag_run, "conf", None))  # what the user sent, before the merge
        return plan_step(pipeline, ctx["dag"].dag_id, ctx["run_id"], ctx.get("logical_date"),
                         params=dict(ctx["params"]), run_type=getattr(dag_run.run_type, "value", dag_run.run_type),
                         actor=getattr(dag_run, "triggering_user_name", None) or "airflow",
                         airflow_interval=(ctx.get("data_interval_start"), ctx.get("data_interval_end")),
                         trigger=fired_by(ctx.get("triggering_asset_events"), input_asset_uri(pipeline.name)))


def run_commit(cfg_path: str, asset: Any, planned: dict, ctx: Any) -> dict:
    """The commit task: ``tasks.commit_step`` for the batches ``planned`` (the plan task's XCom),
    from the attempt the spark_job task returned; the result goes on the asset event."""
    from offsetbatch.dag.asset_partitions import add_partitions
    from offsetbatch.dag.retry_policy import fail_without_retry
    from offsetbatch.dag.tasks import commit_step

    attempt = ctx["ti"].xcom_pull(task_ids="spark_job")
    with fail_without_retry():  # a table that cannot take the batch's columns refuses every attempt alike
        pipeline = Pipeline.load(cfg_path)
        result = commit_step(pipeline, [b["batch_id"] for b in planned["batches"]], attempt)
    ctx["outlet_events"][asset].extra = result
    if pipeline.cfg.airflow.asset_partitions:
        add_partitions(ctx["outlet_events"][asset], result)
    return result
