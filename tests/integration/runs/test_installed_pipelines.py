"""One reader of the installed pipelines: with ``OFFSETBATCH_PIPELINES`` naming three folders (the
compose deployment's layout: the main folder, ``postgres/`` and ``iceberg/``), the DAGs Airflow
parses, the UI plugin's pipeline list and ``offsetbatch`` (no ``--pipelines``) show the same
pipelines. Real Airflow DagBag, a real broker for ``status``, the CLI as a user runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from offsetbatch_dev import PROJECT_ROOT

pytestmark = pytest.mark.integration

SINKS = {
    "main": "sink: {{path: {root}/tables/{name}}}\n",
    "postgres": ("sink: {{type: postgres, table: public.{name}, path: {root}/staging/{name}}}\n"),
    "iceberg": ("sink: {{type: iceberg, namespace: lake, table: {name}, warehouse: {root}/warehouse, "
                "path: {root}/staging/{name}}}\n"),
}


def _yaml(name: str, topic: str, root, folder: str, ledger: str) -> str:
    return (f"name: {name}\nkafka: {{topics: [{topic}]}}\nledger: {{url: '{ledger}'}}\n"
            + SINKS[folder].format(root=root, name=name))


@pytest.fixture
def three_folders(tmp_path, airflow_env, kafka_broker, postgres):
    topic = "installed-pipelines"
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    if topic not in admin.list_topics():
        admin.create_topics([NewTopic(topic, 2, 1)])
    admin.close()
    pg_ledger = postgres.create_database("installed_pipelines")
    folders = []
    for folder, names in (("main", ["inst_orders", "inst_clicks"]), ("postgres", ["inst_orders_pg"]),
                          ("iceberg", ["inst_orders_lake"])):
        path = tmp_path / "pipelines" / folder
        path.mkdir(parents=True)
        ledger = pg_ledger if folder == "postgres" else f"sqlite:///{tmp_path}/ledger-{folder}.db"
        for name in names:
            (path / f"{name}.yaml").write_text(_yaml(name, topic, tmp_path, folder, ledger))
        folders.append(str(path))
    dags = tmp_path / "dags"
    dags.mkdir()
    for f in (PROJECT_ROOT / "dags").glob("*.py"):
        shutil.copy(f, dags)
    env = {**airflow_env, "OFFSETBATCH_PIPELINES": os.pathsep.join(folders)}
    return env, dags


def test_dags_ui_and_cli_list_the_same_pipelines(three_folders, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    from offsetbatch.monitor.sources import Sources

    env, dags = three_folders
    expected = {"inst_orders", "inst_clicks", "inst_orders_pg", "inst_orders_lake"}
    monkeypatch.setenv("OFFSETBATCH_PIPELINES", env["OFFSETBATCH_PIPELINES"])

    bag = DagBag(dag_folder=str(dags))
    assert not bag.import_errors
    assert set(bag.dags) == {f"offsetbatch_{n}" for n in expected}

    assert set(Sources().pipelines()) == expected  # what every UI page and API answer reads

    init = subprocess.run(["offsetbatch", "--json", "ledger", "init"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert init.returncode == 0, init.stderr
    assert len(json.loads(init.stdout)) == 3  # one ledger per database: two SQLite files and the PostgreSQL one
    status = subprocess.run(["offsetbatch", "--json", "status"], env=env, capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert {s["pipeline"] for s in shown} == expected
    assert all(s["kafka_error"] is None for s in shown)
