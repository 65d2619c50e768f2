"""Every DAG file imports cleanly and every pipeline config has its DAG, shaped as documented;
a broken config is a readable import error naming the file and the field."""

from __future__ import annotations

import pytest

from offsetbatch.config import load_all
from offsetbatch.paths import PROJECT_ROOT


@pytest.fixture(scope="module")
def bag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(PROJECT_ROOT / "dags"))


def test_no_import_errors(bag):
    assert bag.import_errors == {}
    assert bag.dags, "dags/ holds at least one DAG"


def test_one_dag_per_pipeline_config(bag):
    assert {c.dag_id for c in load_all().values()} <= set(bag.dags)


def test_dag_shape(bag):
    from airflow.timetables.interval import CronDataIntervalTimetable

    for cfg in load_all().values():
        dag = bag.dags[cfg.dag_id]
        assert isinstance(dag.timetable, CronDataIntervalTimetable)
        assert dag.max_active_runs == 1
        plan, spark, commit = (dag.get_task(t) for t in ("plan", "spark_job", "commit"))
        assert plan.downstream_task_ids == {"spark_job"} and spark.downstream_task_ids == {"commit"}
        assert {t.pool for t in dag.tasks} == {cfg.pool}
        assert type(spark).__name__ == "BatchSparkSubmitOperator" and spark._conn_id == cfg.spark.conn_id
        assert commit.outlets and commit.outlets[0].uri.endswith(cfg.sink.path)


def test_trigger_form_params(bag):
    """The Trigger DAG form: every field documented; defaults make a plain trigger a 'next' run and
    a reset a dry run."""
    for cfg in load_all().values():
        params = bag.dags[cfg.dag_id].params
        assert set(params) == {"mode", "replay_start", "replay_end", "batch_ids", "reset_to", "dry_run",
                               "allow_rewind", "reason"}
        for name in params:
            param = params.get_param(name)
            assert param.description and param.schema.get("title"), name
        assert params["mode"] == "next" and params.get_param("mode").schema["enum"] == ["next", "replay", "reset"]
        assert params["dry_run"] is True and params["allow_rewind"] is False


def test_a_bad_config_is_an_import_error_naming_file_and_field(tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\nkafka: {topics: [x]}\nsink: {path: relative/path}\n")
    (tmp_path / "broken_dag.py").write_text(
        f"# Airflow DAG\nfrom offsetbatch.dag_factory import pipeline_dag\ndag = pipeline_dag({str(bad)!r})\n"
    )
    errors = DagBag(dag_folder=str(tmp_path)).import_errors
    assert len(errors) == 1
    message = next(iter(errors.values()))
    assert str(bad) in message and "field 'sink.path'" in message
