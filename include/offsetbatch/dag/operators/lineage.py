"""``BatchLineage``: the OpenLineage methods Airflow's OpenLineage provider asks the pipeline's
operators for. Only the provider calls them, so nothing here costs a run without it; the
datasets and facets are built in ``offsetbatch.dag.lineage``.

The provider calls them in a process it forks from the task after ``execute`` and stops after a
few seconds; that process must not talk to Airflow (an XCom pull there never returns). So
``execute`` keeps what the lineage needs on the operator: the run's plan and, for the commit, its
result."""

from __future__ import annotations

from typing import Any


class BatchLineage:
    """Mix into an operator with ``config_path``; its ``execute`` sets ``lineage_plan`` (the plan
    task's result) and, where the task's own result counts rows, ``lineage_result``."""

    plan_task_id: str = "plan"
    lineage_outputs: bool = True  # whether the task writes the sink's target (not the plan)
    lineage_plan: dict | None = None
    lineage_result: dict | None = None

    def remember_plan(self, context: Any) -> dict | None:
        """The plan task's XCom, kept for the lineage methods (they may not pull it themselves)."""
        self.lineage_plan = context["ti"].xcom_pull(task_ids=self.plan_task_id)
        return self.lineage_plan

    def _lineage(self, completed: bool):
        from offsetbatch.dag.lineage import task_lineage
        from offsetbatch.pipeline import Pipeline

        return task_lineage(Pipeline.load(self.config_path), self.lineage_plan,
                            self.lineage_result if completed else None, outputs=self.lineage_outputs)

    def get_openlineage_facets_on_complete(self, task_instance: Any):
        return self._lineage(completed=True)

    def get_openlineage_facets_on_failure(self, task_instance: Any):
        return self._lineage(completed=False)
