"""Airflow DAGs of every installed offsetbatch pipeline: one DAG per YAML config in
``OFFSETBATCH_PIPELINES`` (default ``include/pipelines/``). Adding a pipeline is adding its YAML
file; no DAG file per pipeline. A config that does not load has no DAG and is reported as the
import error of ``offsetbatch_pipeline_errors.py`` (see ``offsetbatch.dag.factory``)."""

from offsetbatch.dag.factory import pipeline_dags

globals().update(pipeline_dags())
