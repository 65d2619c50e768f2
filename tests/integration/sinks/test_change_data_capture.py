"""Change data capture end to end (issue 44): a Debezium change stream (envelopes as Debezium's
PostgreSQL connector writes them, produced here: no Debezium server) of inserts, updates, deletes
and re-inserts of the same keys, spread over three partitions and three hourly batches, with the
tombstones Debezium writes after deletes; upserted by ``source.lsn`` through Airflow, the real
broker and Spark (the suite's Connect server) into PostgreSQL, encoded as Debezium's JSON (with
the heartbeats and a schema-change event mixed in), and into Iceberg, encoded as Debezium's Avro
through the schema registry (``debezium-avro``; confluent-kafka's own ``AvroSerializer`` against
``tests/schema_registry_server.py``, which implements the registry's documented REST protocol: no
real registry can run here; heartbeats and schema changes have topics of their own there). After every run, every replay (batches 3, 1, 2 in that order, then
batch 2 again under a new transform) and a kill -9 at the commit's boundary (PostgreSQL: inside
its transaction; Iceberg: between the ledger commit and the upserted table's snapshot), the table
read by a reader that is not ours (psycopg2; pyiceberg's scan) equals a model that applies the
changes in LSN order, row by row: no key regressed, none resurrected.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg2
import pytest
import sqlalchemy as sa
from schema_registry_server import SchemaRegistryServer

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]
BASE = datetime(2026, 11, 3, tzinfo=timezone.utc)
H = timedelta(hours=1)
TABLE = "public.accounts"
PARTITIONS = 3
TRANSFORM = ("SELECT id, {name} AS name, balance, cdc_deleted, cdc_version, kafka_topic, kafka_partition, "
             "kafka_offset FROM records")
COMMIT = ("import sys\nfrom offsetbatch.dag.tasks import commit_step\nfrom offsetbatch.pipeline import Pipeline\n"
          "print(commit_step(Pipeline.load(sys.argv[1]), [int(sys.argv[2])], sys.argv[3]))\n")


def _change_stream(rng: random.Random, hours: int, per_hour: int) -> list[dict]:
    """Changes in LSN order: each a dict with hour, lsn, op, row (None for a delete's missing after)."""
    changes, live, lsn = [], {}, 1000
    for hour in range(hours):
        for _ in range(per_hour):
            lsn += rng.randint(1, 5)
            key = rng.randint(1, 40)
            if key in live and rng.random() < 0.25:
                changes.append({"hour": hour, "lsn": lsn, "op": "d", "before": live.pop(key), "after": None})
            else:
                row = {"id": key, "name": f"n{lsn}", "balance": rng.randint(0, 10_000)}
                changes.append({"hour": hour, "lsn": lsn, "op": "u" if key in live else "c",
                                "before": live.get(key), "after": row})
                live[key] = row
    return changes


# Debezium's Avro envelope for the accounts table, as its PostgreSQL connector registers it
ROW_AVRO = {"type": "record", "name": "Value", "namespace": "shop.public.accounts", "fields": [
    {"name": "id", "type": "int"}, {"name": "name", "type": ["null", "string"], "default": None},
    {"name": "balance", "type": ["null", "long"], "default": None}]}
ENVELOPE_AVRO = {"type": "record", "name": "Envelope", "namespace": "shop.public.accounts", "fields": [
    {"name": "before", "type": ["null", ROW_AVRO], "default": None},
    {"name": "after", "type": ["null", "shop.public.accounts.Value"], "default": None},
    {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                "fields": [{"name": "connector", "type": "string"}, {"name": "db", "type": "string"},
                                           {"name": "table", "type": "string"}, {"name": "lsn", "type": ["null", "long"],
                                                                                "default": None}]}},
    {"name": "op", "type": "string"}, {"name": "ts_ms", "type": ["null", "long"], "default": None}]}


def _json_encoder(topic: str, registry_url: str | None):
    """Debezium's JSON converter with schemas on: ``{"schema": …, "payload": envelope}``."""
    return lambda payload: json.dumps({"schema": {"type": "struct", "name": "shop.public.accounts.Envelope"},
                                       "payload": payload}).encode()


def _avro_encoder(topic: str, registry_url: str):
    """Debezium's Avro converter: the envelope through the registry, confluent-kafka's serializer."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(ENVELOPE_AVRO))
    ctx = SerializationContext(topic, MessageField.VALUE)
    return lambda payload: serialize(payload, ctx)


def _produce(bootstrap: str, topic: str, changes: list[dict], rng: random.Random, encode, extras: bool) -> int:
    """Debezium envelopes, each on a random partition (keys move between partitions: only the LSN
    orders them), a tombstone after each delete and, with ``extras`` (JSON), a heartbeat and a
    schema-change event per hour."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    sent = 0

    def send(hour: int, key: int | None, value: bytes | None, minute: int) -> None:
        nonlocal sent
        ts = int((BASE + hour * H + timedelta(minutes=minute)).timestamp() * 1000)
        producer.send(topic, key=None if key is None else json.dumps({"id": key}).encode(), value=value,
                      partition=rng.randrange(PARTITIONS), timestamp_ms=ts)
        sent += 1

    for i, c in enumerate(changes):
        minute = 1 + i % 55
        key = (c["after"] or c["before"])["id"]
        send(c["hour"], key, encode({"before": c["before"], "after": c["after"], "op": c["op"],
                                     "ts_ms": 1700000000000 + c["lsn"],
                                     "source": {"connector": "postgresql", "db": "shop", "table": "accounts",
                                                "lsn": c["lsn"]}}), minute)
        if c["op"] == "d":
            send(c["hour"], key, None, minute)
    for hour in sorted({c["hour"] for c in changes}) if extras else []:
        send(hour, None, json.dumps({"ts_ms": 1700000000000}).encode(), 56)
        send(hour, None, json.dumps({"source": {"lsn": 1}, "databaseName": "shop", "ddl": "ALTER TABLE accounts ADD x "
                                     "int", "tableChanges": []}).encode(), 57)
    producer.flush()
    producer.close()
    return sent


def _model(changes: list[dict], rename=lambda n: n) -> dict[int, tuple]:
    table: dict[int, tuple] = {}
    for c in sorted(changes, key=lambda c: c["lsn"]):
        if c["op"] == "d":
            table.pop(c["before"]["id"], None)
        else:
            table[c["after"]["id"]] = (rename(c["after"]["name"]), c["after"]["balance"], c["lsn"])
    return table


def _postgres_rows(url: str) -> list[tuple]:
    u = sa.make_url(url)
    conn = psycopg2.connect(host=u.host, port=u.port, user=u.username, password=u.password, dbname=u.database)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, name, balance, cdc_version, cdc_deleted FROM {TABLE}")
            return cur.fetchall()
    finally:
        conn.close()


def _iceberg_rows(url: str) -> list[tuple]:
    from offsetbatch_dev.verify import iceberg_table

    table = iceberg_table(url, ICEBERG_TABLE)
    columns = ["id", "name", "balance", "cdc_version", "cdc_deleted"]
    return [tuple(r[c] for c in columns) for r in table.scan(selected_fields=tuple(columns)).to_arrow().to_pylist()]


# per sink: its settings, the reader that is not ours, where a kill lands at the commit's boundary, and
# the encoding its stream is produced in (each of Debezium's two, once)
SINKS = {
    "postgres": ({"type": "postgres", "table": TABLE}, _postgres_rows, "commit.after_copy", "json"),
    "iceberg": ({"type": "iceberg", "namespace": "cdc", "table": "accounts"}, _iceberg_rows,
                "commit.after_iceberg_commit", "avro"),
}
VALUE = {"json": {"format": "debezium", "schema": "id INT, name STRING, balance BIGINT"},
         "avro": {"format": "debezium-avro", "schema": None, "schema_registry": {"conn_id": "schema_registry_default"}}}
ICEBERG_TABLE = "cdc.accounts"


def _table(sink: str, url: str) -> dict[int, tuple]:
    rows = SINKS[sink][1](url)
    assert len(rows) == len({r[0] for r in rows}), "one row per key"
    assert not any(r[4] for r in rows), "a delete is never a row"
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


@pytest.fixture(scope="module")
def registry():
    with SchemaRegistryServer() as server:
        yield server


@pytest.mark.parametrize("sink", list(SINKS), ids=[f"{s}-debezium-{v[3]}" for s, v in SINKS.items()])
def test_a_debezium_stream_upserted_by_lsn_survives_replays_in_any_order_and_a_kill(make_pipeline, postgres, sink,
                                                                                   registry, tmp_path):
    rng = random.Random(44)
    changes = _change_stream(rng, hours=3, per_hour=60)
    url = postgres.create_database(f"cdc_{uuid.uuid4().hex[:8]}")
    settings, _, kill_at, encoding = SINKS[sink]
    if sink == "iceberg":
        settings = {**settings, "warehouse": str(tmp_path / "warehouse")}  # the catalog: the ledger's database
    p = make_pipeline(f"_{sink}", ledger_url=url,
                      value={**VALUE[encoding], "required": ["id"], "version": "source.lsn"},
                      transform={"sql": TRANSFORM.format(name="name")},
                      sink={**settings, "event_time_column": None, "mode": "upsert", "key": ["id"],
                            "version_column": "cdc_version", "delete_column": "cdc_deleted"})
    p.env = {**p.env, "AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT": json.dumps({"conn_type": "http", "host": registry.url})}
    encode = (_avro_encoder if encoding == "avro" else _json_encoder)(p.topic, registry.url)
    sent = _produce(p.bootstrap, p.topic, changes, rng, encode, extras=encoding == "json")
    deletes = sum(c["op"] == "d" for c in changes)
    assert deletes > 5 and any(c["op"] == "c" and c["before"] is None and any(
        d["op"] == "d" and d["before"]["id"] == c["after"]["id"] and d["lsn"] < c["lsn"] for d in changes)
        for c in changes), "the stream re-inserts deleted keys"

    for hour in range(3):
        run = p.run(BASE + hour * H)
        assert run.ok, run.output[-4000:]
        assert _table(sink, url) == _model([c for c in changes if c["hour"] <= hour]), f"after hour {hour}"
    expected = _model(changes)
    batches = sorted(p.ledger.list_batches(p.name, 10), key=lambda b: b.batch_id)
    assert [b.batch_id for b in batches] == [1, 2, 3]
    assert sum(b.stats["rows_in"] for b in batches) == sent
    assert sum(b.stats["rows_rejected"] for b in batches) == 0  # tombstones, heartbeats, schema changes: skipped

    for n in (3, 1, 2):
        replay = p.run(None, conf={"mode": "replay", "batch_ids": str(n), "reason": f"cdc replay {n}"})
        assert replay.ok, replay.output[-4000:]
        assert _table(sink, url) == expected, f"after replaying batch {n}"

    # a transform change, replayed for batch 2 only: exactly the keys whose newest change is in batch
    # 2 take the new transform's values
    config = yaml_load(p.config_path)
    config["transform"]["sql"] = TRANSFORM.format(name="upper(name)")
    p.config_path.write_text(yaml_dump(config))
    replay = p.run(None, conf={"mode": "replay", "batch_ids": "2", "reason": "transform changed"})
    assert replay.ok, replay.output[-4000:]
    in_batch_2 = {c["lsn"] for c in changes if c["hour"] == 1}
    expected = {k: ((v[0].upper(), *v[1:]) if v[2] in in_batch_2 else v) for k, v in expected.items()}
    assert _table(sink, url) == expected
    assert any(v[2] in in_batch_2 for v in expected.values()) and any(v[2] not in in_batch_2 for v in expected.values())

    # kill -9 at the commit's boundary (PostgreSQL: inside its transaction, after the change log and the
    # table were rewritten; Iceberg: after the ledger commit and the changes table's snapshot, before the
    # upserted table's): nothing of it is visible; the rerun of the commit lands it
    replay = p.run(None, conf={"mode": "replay", "batch_ids": "1", "reason": "kill inside the commit"},
                   faults="commit.before_transaction")
    replay.assert_failed_with("injected fault at commit.before_transaction")
    [pending] = [b for b in p.ledger.list_batches(p.name, 20) if b.status == "planned"]
    attempt = next(Path(p.cfg.sink.root, "_offsetbatch", "attempts", f"batch_id={pending.batch_id}").glob(
        "attempt=*/_manifest.json")).parent.name.removeprefix("attempt=")
    env = {k: v for k, v in p.env.items() if k != "OFFSETBATCH_FAULTS"}
    killed = subprocess.run([sys.executable, "-c", COMMIT, str(p.config_path), str(pending.batch_id), attempt],
                            env={**env, "OFFSETBATCH_FAULTS": f"{kill_at}:kill"}, capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:] + killed.stderr[-3000:]
    assert _table(sink, url) == expected, "a commit killed at its boundary changed the table readers see"
    finished = subprocess.run([sys.executable, "-c", COMMIT, str(p.config_path), str(pending.batch_id), attempt],
                              env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    in_batch_1 = {c["lsn"] for c in changes if c["hour"] == 0}
    assert _table(sink, url) == {k: ((v[0].upper(), *v[1:]) if v[2] in in_batch_1 else v) for k, v in expected.items()}


def yaml_load(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


def yaml_dump(doc: dict) -> str:
    import yaml

    return yaml.safe_dump(doc)
