"""A task process parses the DAG file for one DAG (Airflow's parsing context names it): the factory
then loads that pipeline's config only and builds its DAG only, so a task's start does not grow
with the number of installed pipelines; the dag-processor (no context) still gets every DAG."""

from __future__ import annotations

import pytest
import yaml

from offsetbatch.config import installed
from offsetbatch.dag.factory import pipeline_dags


def _pipeline(folder, file: str, name: str, **extra) -> None:
    doc = {"name": name, "kafka": {"topics": [name]}, "sink": {"path": f"/tmp/tables/{name}"}, **extra}
    (folder / f"{file}.yaml").write_text(yaml.safe_dump(doc))


@pytest.fixture
def fleet(tmp_path):
    for i in range(5):
        _pipeline(tmp_path, f"p{i}", f"p{i}")
    _pipeline(tmp_path, "p5", "p5", maintenance={"schedule": "0 3 * * *"})
    (tmp_path / "broken.yaml").write_text("name: broken\nkafka: [unclosed\n")
    return tmp_path


@pytest.fixture
def parsing_for(monkeypatch):
    def set_dag(dag_id: str) -> None:
        monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", dag_id)
        monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_TASK_ID", "plan")
    return set_dag


def test_the_dag_processor_gets_every_dag(fleet):
    assert set(pipeline_dags(str(fleet))) == {*(f"offsetbatch_p{i}" for i in range(6)), "offsetbatch_p5_maintenance"}


@pytest.mark.parametrize("dag_id, built", [
    ("offsetbatch_p3", {"offsetbatch_p3"}),
    ("offsetbatch_p5", {"offsetbatch_p5", "offsetbatch_p5_maintenance"}),
    ("offsetbatch_p5_maintenance", {"offsetbatch_p5", "offsetbatch_p5_maintenance"}),
])
def test_a_task_process_loads_and_builds_its_own_pipeline_only(fleet, parsing_for, dag_id, built, monkeypatch):
    loaded = []
    real = installed.load_config
    monkeypatch.setattr(installed, "load_config", lambda path: loaded.append(path.name) or real(path))
    parsing_for(dag_id)
    assert set(pipeline_dags(str(fleet))) == built
    assert loaded == [f"p{dag_id[len('offsetbatch_p')]}.yaml"]  # not the broken one, nor the other five


def test_a_name_written_otherwise_is_loaded_to_find_out(tmp_path, parsing_for):
    """A ``name:`` the scan cannot read as a plain name (a variable, flow style) is loaded, so the
    task still finds its pipeline; a name used twice keeps its first file, as the dag-processor does."""
    (tmp_path / "a.yaml").write_text("name: ${PIPE_NAME}\nkafka: {topics: [t]}\nsink: {path: /tmp/tables/a}\n")
    (tmp_path / "b.yaml").write_text("{name: orders, kafka: {topics: [t]}, sink: {path: /tmp/tables/b}}\n")
    _pipeline(tmp_path, "c", "orders")
    _pipeline(tmp_path, "d", "other")
    parsing_for("offsetbatch_orders")
    found = installed.read(str(tmp_path), names=["orders"])
    assert list(found.configs) == ["orders"] and found.configs["orders"].source_file.endswith("b.yaml")
    assert [e.split(":")[0] for e in found.errors] == [f"{tmp_path}/a.yaml", f"{tmp_path}/c.yaml"]


def test_a_dag_id_of_another_product_builds_everything(fleet, parsing_for):
    parsing_for("some_other_dag")
    assert len(pipeline_dags(str(fleet))) == 7
