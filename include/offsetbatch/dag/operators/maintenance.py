"""The maintenance task: one ``offsetbatch.maintenance.maintain`` pass of a pipeline."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator


class MaintainOperator(BaseOperator):
    """Run one maintenance pass of the pipeline; returns its result (XCom) as ``Pass.to_dict``.

    It runs in the pipeline's pool, so it never starts while one of the pipeline's tasks holds the
    slot, and each of its actions holds the pipeline's ledger lock.

    :param config_path: the pipeline's YAML file (re-read, so the pass uses today's retention)
    """

    ui_color = "#fef3c7"

    def __init__(self, *, config_path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path

    def execute(self, context: Any) -> dict:
        from offsetbatch.dag.retry_policy import fail_without_retry
        from offsetbatch.maintenance import maintain
        from offsetbatch.pipeline import Pipeline

        dag_run = context.get("dag_run")
        actor = getattr(dag_run, "triggering_user_name", None) or f"airflow:{context.get('run_id')}"
        with fail_without_retry():  # a bad config or a refused step fails every try alike
            pipeline = Pipeline.load(self.config_path)
            with pipeline.ledger() as ledger:
                return maintain(pipeline, ledger, actor=actor).to_dict()
