"""Airflow DAG of the sample pipeline; the pipeline itself is include/pipelines/sample_events.yaml."""

from offsetbatch.dag_factory import pipeline_dag

dag = pipeline_dag("sample_events")
