"""The Airflow DAG import error of every offsetbatch pipeline config that does not load, naming
each file and field. Defines no DAG: the pipelines' DAGs come from ``offsetbatch_pipelines.py``,
which skips a bad config instead of raising, because an import error there would hide every
pipeline (see ``offsetbatch.dag.factory``)."""

from offsetbatch.dag.factory import raise_config_errors

raise_config_errors()
