"""A confluent-avro pipeline through real Airflow runs (``dags test``), spark-submit and the real
broker, with records written by confluent-kafka 2.16.1's own ``AvroSerializer``: two writer schema
versions in one batch (v1 in the prefix form, v2 in the header form), garbage and an unknown schema
id among them. No real schema registry can run here: ``tests/schema_registry_server.py`` stands in
for one (the documented Confluent REST routes the client and the serializer call).

Exactly-once is checked record by record with pyarrow (not our reader) after the crash suite's
faults (the Spark driver killed mid-write, the commit killed inside its transaction), then after a
replay that follows a change of the reader schema; a writer schema the reader cannot read fails its
batch before the commit, naming the field, without a retry; a recursive reader schema and a
registry URL that answers with a web page fail the plan once, clearly, before the ledger is touched;
a registry that is down fails the plan before the ledger is touched."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.dataset as pads
import pytest
from harness import avro_pipeline, produce_avro, set_reader_version
from schema_registry_server import SchemaRegistryServer

from offsetbatch.ledger.schema import events
from offsetbatch.sinks.files import TableLayout
from offsetbatch_dev.sample.avro_events import EVENT_V1, EVENT_V2, AvroEvents, referrer_of
from offsetbatch_dev.sample.producer import produce

pytestmark = pytest.mark.integration
BASE = datetime(2026, 11, 3, tzinfo=timezone.utc)
H = timedelta(hours=1)


def _output(p) -> dict[str, dict]:
    table = pads.dataset(p.table, format="parquet", partitioning="hive", ignore_prefixes=["_", "."]).to_table()
    return {row["event_id"]: row for row in table.to_pylist()}


def _schema_events(p) -> list[dict]:
    with p.ledger.reading() as conn:
        rows = conn.execute(events.select().where(events.c.pipeline == p.name, events.c.kind == "value_schema")
                            .order_by(events.c.at)).all()
    return [r.detail for r in rows]


def test_avro_batch_survives_crashes_then_a_replay_writes_the_new_reader_shape(make_pipeline):
    registry = SchemaRegistryServer()
    try:
        p = avro_pipeline(make_pipeline, registry.url, version=1)
        v1 = produce_avro(p, registry.url, EVENT_V1, "prefix", 300, seed=1, start=BASE)
        v2 = produce_avro(p, registry.url, EVENT_V2, "header", 300, seed=2, start=BASE)
        assert registry._subjects[f"{p.topic}-value"] == [1, 2]

        killed = p.run(BASE, faults="job.kill_during_write")
        killed.assert_failed_with("killing the Spark driver mid-write")
        # spark-submit on local[2]: the executors are the driver's threads and die with it, mid-write;
        # their partial files stay in the attempt's staging folder, where no reader looks
        layout = TableLayout(p.table)
        assert list(Path(layout.attempts(1)).rglob("part-*")), "the killed attempt left partial files"
        assert not list(Path(layout.attempts(1)).rglob("_manifest.json")) and not Path(layout.data(1)).exists()
        in_commit = p.run(BASE, run_after=killed.run_after, faults="commit.in_transaction")
        in_commit.assert_failed_with("injected fault at commit.in_transaction")
        assert p.ledger.get_batch(p.name, 1).status == "planned"
        done = p.run(BASE, run_after=killed.run_after)
        assert done.ok, done.output[-4000:]
        assert not Path(layout.attempts(1)).exists(), "the killed attempts' files were cleaned up"
        report = p.check()
        assert report.ok and report.rejected_expected > 0, report.summary()

        rows = _output(p)
        produced = {**v1, **v2}
        assert set(rows) == p.expected_ids()
        for event_id, row in rows.items():  # reader pinned to version 1: v2's field is not in the output
            e = produced[event_id]
            assert (row["kind"], row["user_id"], row["page"], row["amount"]) == (
                e["kind"], e["user_id"], e["page"], e.get("amount")), event_id
            assert "referrer" not in row
        assert _schema_events(p)[-1]["reader"] == {"subject": f"{p.topic}-value", "version": 1, "id": 1}
        rejected = pads.dataset(f"{p.table}/_rejected", format="parquet", partitioning="hive").to_table().to_pylist()
        reasons = {r["error"].split(":")[0].split(" is ")[0] for r in rejected}
        assert reasons <= {"not Confluent-framed", "schema id 999999", "Avro body does not decode with writer "
                           "schema id 1"}, reasons
        assert len(reasons) == 3, reasons

        set_reader_version(p, "latest")
        replay = p.run(None, conf={"mode": "replay", "batch_ids": "1", "reason": "reader schema v2"})
        assert replay.ok, replay.output[-4000:]
        report = p.check()
        assert report.ok, report.summary()
        rows = _output(p)
        for event_id, row in rows.items():  # the new nullable column, from v2's records; null for v1's
            expected = referrer_of(produced[event_id]) if event_id in v2 else None
            assert row["referrer"] == expected, event_id
        assert any(row["referrer"] for row in rows.values())
        assert _schema_events(p)[-1]["reader"] == {"subject": f"{p.topic}-value", "version": 2, "id": 2}

        # A writer the reader cannot read (v3 made user_id a string; the reader pinned to v2): the
        # batch fails before its commit, naming the field, and stays planned.
        set_reader_version(p, 2)
        v3 = json.loads(EVENT_V2)
        v3["fields"][2] = {"name": "user_id", "type": "string"}
        serializer = AvroEvents(registry.url, p.topic, json.dumps(v3), "prefix")
        produce(p.bootstrap, p.topic, 20, partitions=2, start=BASE + H, malformed_fraction=0, seed=3,
                id_prefix=f"{p.name}-3-", progress=False, encoder=lambda e: serializer({**e, "user_id": str(e["user_id"])}))
        incompatible = p.run(BASE + H)
        incompatible.assert_failed_with("SchemaIncompatibleError")
        incompatible.assert_failed_with(f"20 record(s) cannot be decoded into the output, the first {p.topic}/")
        incompatible.assert_failed_with(f"the reader schema (subject '{p.topic}-value' version 2, id 2) cannot read "
                                        f"writer schema id 3 (subject '{p.topic}-value' version 3): field(s) 'user_id'")
        assert p.ledger.get_batch(p.name, 3).status == "planned"
        assert "AirflowFailException" in incompatible.output  # no retry: only a change of the reader helps

        # Round three's other registry cases, at run time (issue 58, item 6): the plan task fails once,
        # clearly, before the ledger is touched, and is not retried.
        digest = p.ledger_digest()
        recursive = {"type": "record", "name": "Event", "namespace": "shop", "fields": [
            {"name": "event_id", "type": "string"}, {"name": "kind", "type": "string"},
            {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "parent", "type": ["null", "Event"], "default": None}]}
        version = len(registry._subjects[f"{p.topic}-value"]) + 1
        registry.register(f"{p.topic}-value", json.dumps(recursive))
        set_reader_version(p, version)
        loop = p.run(BASE + H)
        loop.assert_failed_with(f"the value reader schema subject '{p.topic}-value' version {version} is recursive "
                                f"(record 'shop.Event' contains itself through field parent)")
        set_reader_version(p, 2)
        registry.answer_html = True  # the connection pointing at a web page (a proxy's sign-in, a UI)
        page = p.run(BASE + H)
        page.assert_failed_with("with something that is not the registry's JSON")
        page.assert_failed_with("Check that the URL is the registry's REST API")
        registry.answer_html = False
        for failed in (loop, page):
            assert "AirflowFailException" in failed.output and "starting task_id=spark_job" not in failed.output
        assert p.ledger_digest() == digest

        registry.stop()
        digest = p.ledger_digest()
        down = p.run(BASE + H)
        down.assert_failed_with(f"Schema registry {registry.url} (Airflow connection 'schema_registry_default') did "
                                f"not answer")
        down.assert_failed_with(f"pipeline {p.name}")
        assert p.ledger_digest() == digest
    finally:
        registry.stop()

