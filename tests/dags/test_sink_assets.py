"""Each pipeline's DAG announces its sink's real target as its Airflow asset (the commit task's
outlet), in the URI scheme Airflow's providers use for it, never the staging folder every sink
keeps under ``sink.path``. Built by the real DAG factory; names only, never a password."""

from __future__ import annotations

import json

import pytest

from offsetbatch.dag.factory import pipeline_dags

BASE = "name: {name}\nkafka: {{topics: [t-{name}]}}\nledger: {{url: '{ledger}'}}\nsink: {sink}\n"
PG = "postgresql+psycopg2://ob_user:s3cret@db.example.internal:6543/warehouse"


def _outlet(tmp_path, name: str, sink: str, ledger: str | None = None):
    path = tmp_path / f"{name}.yaml"
    path.write_text(BASE.format(name=name, sink=sink, ledger=ledger or f"sqlite:///{tmp_path}/ledger.db"))
    dag = pipeline_dags(str(path))[f"offsetbatch_{name}"]
    [asset] = dag.get_task("commit").outlets
    return asset


@pytest.fixture
def out_cluster(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_OUT_CLUSTER", json.dumps(
        {"conn_type": "kafka", "password": "kafka-secret", "login": "u",
         "extra": {"bootstrap.servers": "broker-a.example:9093,broker-b.example:9093", "security.protocol": "SASL_SSL",
                   "sasl.mechanism": "SCRAM-SHA-512"}}))


@pytest.mark.parametrize("kind", ["files", "postgres", "iceberg", "kafka"])
def test_every_sinks_asset_names_its_target_not_its_staging(tmp_path, kind, out_cluster):
    staging = f"{tmp_path}/staging/{kind}"
    sink, ledger, expected = {
        "files": (f"{{path: {tmp_path}/tables/orders}}", None, f"file://{tmp_path}/tables/orders"),
        "postgres": (f"{{type: postgres, table: sales.orders, path: {staging}}}", PG,
                     "postgres://db.example.internal:6543/warehouse/sales/orders"),
        "iceberg": (f"{{type: iceberg, namespace: lake, table: orders, warehouse: {tmp_path}/wh, path: {staging}}}",
                    None, "iceberg://offsetbatch/lake/orders"),
        "kafka": (f"{{type: kafka, topic: orders-clean, conn_id: out_cluster, path: {staging}}}", None,
                  "kafka://broker-a.example:9093/orders-clean"),
    }[kind]
    asset = _outlet(tmp_path, f"orders_{kind}", sink, ledger)
    assert asset.uri == expected
    assert asset.name == expected  # one target, one asset, whichever pipelines write it
    assert "staging" not in asset.uri and "s3cret" not in asset.uri and "kafka-secret" not in asset.uri


def test_two_pipelines_writing_one_table_update_one_asset(tmp_path):
    """Airflow deactivates an asset whose URI another active asset holds under another name (and
    fails its tasks): the asset is the target, named by its URI, not one per pipeline."""
    sink = f"{{type: iceberg, namespace: lake, table: orders, warehouse: {tmp_path}/wh, path: {tmp_path}/stage"
    first = _outlet(tmp_path, "orders_eu", sink + "_eu}")
    second = _outlet(tmp_path, "orders_us", sink + "_us}")
    assert (first.name, first.uri) == (second.name, second.uri) == ("iceberg://offsetbatch/lake/orders",) * 2


def test_an_unresolvable_connection_names_the_asset_after_it_and_keeps_the_dag(tmp_path):
    """A connection the DAG processor cannot read at parse time must not cost the pipeline its DAG."""
    asset = _outlet(tmp_path, "orders_lost", f"{{type: kafka, topic: orders-clean, conn_id: no_such_conn, "
                                             f"path: {tmp_path}/staging}}")
    assert asset.uri == "kafka://no_such_conn/orders-clean"


def test_the_dags_documentation_never_shows_the_ledgers_password(tmp_path):
    """doc_md is serialized into Airflow's database and shown to every UI viewer (issue 41, case 9)."""
    path = tmp_path / "orders_doc.yaml"
    path.write_text(BASE.format(name="orders_doc", sink=f"{{path: {tmp_path}/tables/orders}}", ledger=PG))
    dag = pipeline_dags(str(path))["offsetbatch_orders_doc"]
    assert "s3cret" not in dag.doc_md
    assert "postgresql+psycopg2://ob_user:***@db.example.internal:6543/warehouse" in dag.doc_md
