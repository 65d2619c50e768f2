"""The postgres sink's pure logic: config refusals (another database, SQL metacharacters), type
mapping and compatibility, the CSV the COPY reads, fault-point parsing. The database side is in
tests/integration/sinks/test_postgres_sink.py."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from offsetbatch import faults
from offsetbatch.config import ConfigError, load_config
from offsetbatch.sinks import sink_for
from offsetbatch.sinks.postgres import CopyStream, PostgresSink, compatible, staged_columns

PG = "postgresql+psycopg2://ob:secret@db.example:5432/ledger"


def _cfg(tmp_path, sink: dict, ledger: dict | None = None):
    doc = {"name": "orders", "kafka": {"topics": ["orders"]},
           "sink": {"type": "postgres", "path": f"{tmp_path}/staging", "table": "public.orders", **sink}}
    if ledger is not None:
        doc["ledger"] = ledger
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_config(path)


def test_the_sink_uses_the_ledgers_database_and_keeps_its_url_out_of_job_specs(tmp_path):
    cfg = _cfg(tmp_path, {}, {"url": PG})
    assert isinstance(sink_for(cfg.name, cfg.sink), PostgresSink)
    assert cfg.sink.url == PG
    assert "url" not in cfg.sink.model_dump() and "secret" not in json.dumps(cfg.sink.model_dump())
    same = _cfg(tmp_path, {"url": "postgresql+psycopg2://other-user@DB.example/ledger"}, {"url": PG})
    assert same.sink.url == PG
    by_conn = _cfg(tmp_path, {})  # default ledger connection
    assert by_conn.sink.conn_id == "offsetbatch_ledger" and by_conn.sink.url is None


@pytest.mark.parametrize("sink, ledger, message", [
    ({"url": "postgresql+psycopg2://ob@db.example:5432/warehouse"}, {"url": PG},
     "sink.url points at database postgresql+psycopg2://ob@db.example:5432/warehouse but the ledger is at "
     "postgresql+psycopg2://ob:***@db.example:5432/ledger"),
    ({"url": "postgresql+psycopg2://ob@other-host:5432/ledger"}, {"url": PG}, "must live in the ledger's PostgreSQL"),
    ({}, {"url": "sqlite:////tmp/ledger.db"}, "the ledger is SQLite"),
    ({"conn_id": "warehouse"}, None, "sink.conn_id 'warehouse' is not the ledger's connection 'offsetbatch_ledger'"),
    ({"conn_id": "warehouse"}, {"url": PG}, "cannot be checked against ledger.url"),
    ({"url": PG}, {"conn_id": "ledger_pg"}, "cannot be checked against the ledger's connection 'ledger_pg'"),
])
def test_a_target_outside_the_ledgers_database_is_refused_at_load(tmp_path, sink, ledger, message):
    with pytest.raises(ConfigError) as err:
        _cfg(tmp_path, sink, ledger)
    assert message in str(err.value) and "one transaction" in str(err.value)
    assert "secret" not in str(err.value)


@pytest.mark.parametrize("table", [
    "public.orders; DROP TABLE ob_batches", 'public."orders"', "orders", "a.b.c", "public.orders--",
    "public.ord ers", "1abc.orders", "public." + "x" * 60, "public.orders'",
])
def test_table_names_with_sql_metacharacters_are_refused(tmp_path, table):
    with pytest.raises(ConfigError) as err:
        _cfg(tmp_path, {"table": table}, {"url": PG})
    assert "field 'sink.table'" in str(err.value)


@pytest.mark.parametrize("sink, message", [
    ({"mode": "upsert"}, "mode 'upsert' needs 'key'"),
    ({"key": ["id"]}, "'key' only mean something with mode 'upsert'; remove it or set mode: upsert"),
    ({"version_column": "lsn", "delete_column": "gone"},
     "'version_column', 'delete_column' only mean something with mode 'upsert'; remove them"),
    ({"mode": "upsert", "key": ["id"], "version_column": "id"}, "version_column 'id' is also a key column"),
    ({"mode": "upsert", "key": ["id"], "version_column": "v", "delete_column": "v"}, "name the same column"),
    ({"mode": "upsert", "key": ["id"], "delete_column": "gone; --"}, "not a plain SQL identifier"),
    ({"mode": "upsert", "key": ["id; --"]}, "not a plain SQL identifier"),
    ({"event_time_column": "ts"}, "event_time_column"),
    ({"mode": "merge"}, "sink.mode"),
])
def test_bad_sink_settings(tmp_path, sink, message):
    with pytest.raises(ConfigError) as err:
        _cfg(tmp_path, sink, {"url": PG})
    assert message in str(err.value)


def test_mixed_case_names_are_kept_and_quoted(tmp_path):
    sink = sink_for("orders", _cfg(tmp_path, {"table": "Sales.Orders_2"}, {"url": PG}).sink)
    assert (sink.schema_name, sink.table_name) == ("Sales", "Orders_2")
    assert sink._quoted("_rejected") == '"Sales"."Orders_2_rejected"'


def test_spark_schema_wins_over_parquet_types():
    spark_schema = {"type": "struct", "fields": [
        {"name": "ts", "type": "timestamp"}, {"name": "ntz", "type": "timestamp_ntz"},
        {"name": "n", "type": "integer"}, {"name": "d", "type": "decimal(12,3)"},
        {"name": "tags", "type": {"type": "array", "elementType": "string"}}, {"name": "k", "type": "binary"}]}
    schema = pa.schema([("ts", pa.timestamp("ns")), ("ntz", pa.timestamp("us")), ("n", pa.int32()),
                        ("d", pa.decimal128(12, 3)), ("tags", pa.list_(pa.string())), ("k", pa.binary())],
                       metadata={b"org.apache.spark.sql.parquet.row.metadata": json.dumps(spark_schema).encode()})
    assert staged_columns(schema) == [("ts", "timestamp with time zone"), ("ntz", "timestamp without time zone"),
                                      ("n", "integer"), ("d", "numeric(12,3)"), ("tags", "jsonb"), ("k", "bytea")]
    plain = pa.schema([("s", pa.string()), ("f", pa.float32()), ("t", pa.timestamp("us", tz="UTC"))])
    assert staged_columns(plain) == [("s", "text"), ("f", "real"), ("t", "timestamp with time zone")]


@pytest.mark.parametrize("existing, staged, ok", [
    ("bigint", "integer", True), ("integer", "bigint", False), ("text", "integer", False),
    ("double precision", "real", True), ("numeric", "numeric(10,2)", True), ("numeric(10,2)", "numeric(12,2)", False),
    ("timestamp with time zone", "timestamp with time zone", True), ("integer", "text", False),
])
def test_type_compatibility(existing, staged, ok):
    assert compatible(existing, staged) is ok


def test_copy_stream_renders_csv_postgres_reads(tmp_path):
    table = pa.table({
        "s": pa.array(["a", "", None, 'x,"y\nz']),
        "n": pa.array([1, None, 3, 4], pa.int32()),
        "ts": pa.array([datetime(2026, 1, 1, 1, 2, 3, 456789)] * 4, pa.timestamp("ns")),
        "k": pa.array([b"\x00\xff", None, b"", b"a"]),
        "d": pa.array([Decimal("1.25"), None, Decimal("2"), Decimal("3")], pa.decimal128(10, 2)),
        "j": pa.array([[1, 2], None, [], [3]], pa.list_(pa.int64())),
    })
    path = tmp_path / "part-0.parquet"
    pq.write_table(table, path, row_group_size=3)
    stream = CopyStream([str(path)], ["s", "n", "ts", "k", "d", "j"],
                        ["text", "integer", "timestamp with time zone", "bytea", "numeric(10,2)", "jsonb"], 7)
    text = b"".join(iter(lambda: stream.read(5), b"")).decode()
    assert stream.rows == 4
    assert text.splitlines()[0] == '7,"a",1,2026-01-01 01:02:03.456789Z,"\\x00ff",1.25,"[1, 2]"'
    assert text.splitlines()[1] == '7,"",,2026-01-01 01:02:03.456789Z,,,'  # "" is an empty string, nothing is NULL
    assert '"x,""y\nz"' in text and '"\\x"' in text and '"[]"' in text


def test_fault_points_parse_actions(monkeypatch):
    monkeypatch.setenv(faults.ENV, "commit.before_copy:kill, commit.after_copy:pause,plan.after_commit")
    assert faults._points() == {"commit.before_copy": "kill", "commit.after_copy": "pause",
                                "plan.after_commit": "raise"}
    with pytest.raises(faults.InjectedFault):
        faults.checkpoint("plan.after_commit")
    faults.checkpoint("commit.in_transaction")  # not named: nothing happens


def test_the_sample_pipelines_postgres_variant_loads():
    from offsetbatch.config import PIPELINES_DIR
    from offsetbatch.config.installed import load_all

    assert "sample_events_postgres" not in load_all()  # not installed where the ledger is SQLite (make demo)
    cfg = load_all(str(PIPELINES_DIR / "postgres"))["sample_events_postgres"]
    assert cfg.sink.type == "postgres" and cfg.sink.table == "public.sample_events"
    assert cfg.sink.conn_id == cfg.ledger.conn_id  # the table lives in the ledger's database


@pytest.mark.parametrize("sink", [{"path": "/tmp/orders"}, {"type": "kafka", "topic": "out", "staging": "/tmp/s"}])
def test_sinks_without_upserts_refuse_mode_upsert_naming_the_sink_that_has_it(tmp_path, sink):
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump({"name": "orders", "kafka": {"topics": ["orders"]},
                                    "sink": {**sink, "mode": "upsert", "key": ["id"]}}))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    kind = sink.get("type", "files")
    assert (f"sink type '{kind}' has no 'mode': it keeps every record of every batch. Keyed upserts and deletes "
            f"(mode: upsert, key: [...]) are in the delta, iceberg and postgres sinks; remove sink.mode, or use one of them") \
        in str(err.value)
