"""Every DAG file imports cleanly and every pipeline config has its DAG, shaped as documented;
a broken config is a readable import error naming the file and the field. A pipeline is a YAML
file only: dropping one into OFFSETBATCH_PIPELINES makes its DAG appear, and a broken one is
reported without hiding the others."""

from __future__ import annotations

import shutil

import pytest

from offsetbatch.config.installed import load_all
from offsetbatch.dag.factory import pipeline_dags, raise_config_errors
from offsetbatch.errors import ConfigError
from offsetbatch_dev import PROJECT_ROOT
from offsetbatch.plan.request import PARAM_NAMES


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
        if cfg.spark.on_connect:  # the default: the stack's Spark Connect server
            assert type(spark).__name__ == "BatchSparkConnectOperator" and spark.conn_id == cfg.spark.connect_conn_id
        else:
            assert type(spark).__name__ == "BatchSparkSubmitOperator" and spark._conn_id == cfg.spark.conn_id
        assert commit.outlets and commit.outlets[0].uri.endswith(cfg.sink.path)


def test_trigger_form_params(bag):
    """The Trigger DAG form: every field documented; defaults make a plain trigger a 'next' run and
    a reset a dry run."""
    for cfg in load_all().values():
        params = bag.dags[cfg.dag_id].params
        assert set(params) == {"mode", "replay_start", "replay_end", "batch_ids", "allow_more_rejected", "reset_to",
                               "dry_run", "allow_rewind", "allow_data_loss", "reason"} == set(PARAM_NAMES)
        for name in params:
            param = params.get_param(name)
            assert param.description and param.schema.get("title"), name
        assert params["mode"] == "next" and params.get_param("mode").schema["enum"] == ["next", "replay", "reset"]
        assert params["dry_run"] is True and params["allow_rewind"] is False and params["allow_data_loss"] is False
        assert params["allow_more_rejected"] is False  # a replay that rejects more is refused unless asked
        assert "object" in params.get_param("reset_to").schema["type"]  # the README's {"topic": {"0": 1200}}


def test_a_bad_config_is_an_import_error_naming_file_and_field(tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\nkafka: {topics: [x]}\nsink: {path: relative/path}\n")
    (tmp_path / "broken_dag.py").write_text(
        f"# Airflow DAG\nfrom offsetbatch import pipeline_dag\ndag = pipeline_dag({str(bad)!r})\n"
    )
    errors = DagBag(dag_folder=str(tmp_path)).import_errors
    assert len(errors) == 1
    message = next(iter(errors.values()))
    assert str(bad) in message and "field 'sink.path'" in message


def _pipeline_yaml(name: str, tmp_path) -> str:
    return (f"name: {name}\nkafka: {{topics: [t-{name}]}}\nsink: {{path: {tmp_path}/tables/{name}}}\n"
            f"ledger: {{url: 'sqlite:///{tmp_path}/ledger.db'}}\n")


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A pipelines folder given through OFFSETBATCH_PIPELINES: two good configs, one whose sink path is
    relative (a config error), and a DAG folder holding the project's two DAG files."""
    pipelines, dags = tmp_path / "pipelines", tmp_path / "dags"
    pipelines.mkdir()
    dags.mkdir()
    (pipelines / "alpha.yaml").write_text(_pipeline_yaml("alpha", tmp_path))
    (pipelines / "beta.yml").write_text(_pipeline_yaml("beta", tmp_path))
    bad = pipelines / "broken.yaml"
    bad.write_text("name: broken\nkafka: {topics: [x]}\nsink: {path: relative/path}\n")
    for f in (PROJECT_ROOT / "dags").glob("*.py"):
        shutil.copy(f, dags)
    monkeypatch.setenv("OFFSETBATCH_PIPELINES", str(pipelines))
    return pipelines, dags, bad


def test_pipeline_dags_builds_one_dag_per_installed_config(installed):
    pipelines, _, bad = installed
    dags = pipeline_dags()
    assert set(dags) == {"offsetbatch_alpha", "offsetbatch_beta"}
    assert dags["offsetbatch_alpha"].params["allow_data_loss"] is False
    with pytest.raises(ConfigError) as err:
        raise_config_errors()
    assert str(bad) in str(err.value) and "field 'sink.path'" in str(err.value)

    bad.unlink()  # fixed: no error, and single files work as entries too
    raise_config_errors()
    assert set(pipeline_dags(str(pipelines / "alpha.yaml"))) == {"offsetbatch_alpha"}


def test_a_dropped_in_config_gets_its_dag_and_a_bad_one_hides_no_other(installed):
    """What the dag-processor sees: the good pipelines' DAGs, and one import error, on the errors
    file, naming the bad YAML (an import error marks every DAG of its own file stale)."""
    from airflow.dag_processing.dagbag import DagBag

    pipelines, dags, bad = installed
    bag = DagBag(dag_folder=str(dags))
    assert set(bag.dags) == {"offsetbatch_alpha", "offsetbatch_beta"}
    assert [str(k).rsplit("/", 1)[-1] for k in bag.import_errors] == ["offsetbatch_pipeline_errors.py"]
    message = next(iter(bag.import_errors.values()))
    assert str(bad) in message and "field 'sink.path'" in message

    (pipelines / "gamma.yaml").write_text(_pipeline_yaml("gamma", pipelines.parent))
    (pipelines / "alpha_again.yaml").write_text(_pipeline_yaml("alpha", pipelines.parent))  # a name used twice
    bag = DagBag(dag_folder=str(dags))
    assert set(bag.dags) == {"offsetbatch_alpha", "offsetbatch_beta", "offsetbatch_gamma"}
    message = next(iter(bag.import_errors.values()))
    assert "alpha_again.yaml: pipeline name 'alpha' is already used by" in message and str(bad) in message


def test_a_table_named_in_any_script_gets_an_ascii_asset_and_its_dag(installed):
    """Issue 41, case 13: Airflow refuses a non-ASCII asset URI; the outlet names the folder
    percent-encoded (RFC 3986), so the pipeline has its DAG and its commit its asset event."""
    pipelines, _, bad = installed
    bad.unlink()
    (pipelines / "events.yaml").write_text(_pipeline_yaml("events", pipelines.parent).replace(
        "/tables/events", "/tables/événements"))
    dags = pipeline_dags()
    [asset] = dags["offsetbatch_events"].get_task("commit").outlets
    assert asset.uri == f"file://{pipelines.parent}/tables/%C3%A9v%C3%A9nements"
    raise_config_errors()  # nothing to report


def test_a_dag_that_cannot_be_built_hides_no_other_and_is_an_import_error(installed, monkeypatch):
    """Issue 41, case 13: one pipeline whose DAG cannot be built (here its sink cannot name its
    asset) is skipped by the DAGs file and named by the errors file; the others keep their DAGs."""
    from airflow.dag_processing.dagbag import DagBag

    from offsetbatch.sinks.files import FilesSink

    pipelines, dags, bad = installed
    bad.unlink()
    real = FilesSink.asset_uri

    def refused(self):
        if self.pipeline_name == "beta":
            raise ValueError("URI must be ascii")
        return real(self)
    monkeypatch.setattr(FilesSink, "asset_uri", refused)
    bag = DagBag(dag_folder=str(dags))
    assert set(bag.dags) == {"offsetbatch_alpha"}
    assert [str(k).rsplit("/", 1)[-1] for k in bag.import_errors] == ["offsetbatch_pipeline_errors.py"]
    message = next(iter(bag.import_errors.values()))
    assert f"{pipelines / 'beta.yml'}: pipeline beta's DAG cannot be built: ValueError: URI must be ascii" in message


def test_airflow_queues_route_each_task_and_a_bad_name_names_the_field(installed):
    """``airflow.queues`` sets each task's Celery queue (the deployment test pins plan, spark_job
    and commit to three workers with it); a task left out keeps Airflow's default queue."""
    from airflow.configuration import conf

    pipelines, _, bad = installed
    bad.unlink()
    (pipelines / "alpha.yaml").write_text(_pipeline_yaml("alpha", pipelines.parent) + (
        "airflow: {queues: {plan: light, spark_job: 'spark-drivers', maintain: light}}\n"
        "maintenance: {schedule: '0 3 * * *'}\n"))
    dags = pipeline_dags()
    tasks = dags["offsetbatch_alpha"].task_dict
    default = conf.get("operators", "default_queue")
    assert {t: tasks[t].queue for t in ("plan", "spark_job", "commit")} == {
        "plan": "light", "spark_job": "spark-drivers", "commit": default}
    assert dags["offsetbatch_alpha_maintenance"].get_task("maintain").queue == "light"
    assert {t.queue for t in dags["offsetbatch_beta"].tasks} == {default}

    (pipelines / "alpha.yaml").write_text(_pipeline_yaml("alpha", pipelines.parent) +
                                          "airflow: {queues: {comit: light}}\n")
    pipeline_dags()
    with pytest.raises(ConfigError) as err:
        raise_config_errors()
    assert "airflow.queues.comit" in str(err.value)
    (pipelines / "alpha.yaml").write_text(_pipeline_yaml("alpha", pipelines.parent) +
                                          "airflow: {queues: {plan: 'two words'}}\n")
    pipeline_dags()
    with pytest.raises(ConfigError) as err:
        raise_config_errors()
    assert "airflow.queues.plan" in str(err.value) and "'two words' is not a queue name" in str(err.value)
