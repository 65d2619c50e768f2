"""Schema evolution from Avro and Protobuf into the Iceberg and PostgreSQL sinks: a batch decoded with
reader version 1, then replayed after the reader moved to version 2 (an added optional field). The
new field becomes a nullable column under those sinks' own rules, filled from the records written
with v2 and null for v1's; every record once. Tables read back with pyiceberg and plain SQL, not our
code. Avro records are written by confluent-kafka 2.16.1's AvroSerializer, Protobuf ones framed as
its ProtobufSerializer frames them (v1 prefix, v2 header form); no real schema registry can run
here, ``tests/schema_registry_server.py`` stands in for one."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pyarrow.dataset as pads
import pytest
import yaml
from harness import avro_pipeline, produce_avro, sample_events, sample_sink, set_reader_version
from schema_registry_server import SchemaRegistryServer

from offsetbatch.config import load_config
from offsetbatch_dev import verify
from offsetbatch_dev.sample.avro_events import EVENT_V1, EVENT_V2, referrer_of

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]  # Spark jobs on the suite's Connect server
BASE = datetime(2026, 11, 4, tzinfo=timezone.utc)
# The output without the Kafka key and headers (PostgreSQL has no column type for the headers array).
TRANSFORM = "SELECT * EXCEPT (kafka_key, kafka_headers) FROM records"


def _pipeline(make_pipeline, sink: str, registry_url: str, postgres, kind: str = "avro"):
    table = f"avro_{uuid.uuid4().hex[:6]}"
    settings = {**sample_sink(sink), "event_time_column": None,
                "table": table if sink == "iceberg" else f"public.{table}"}
    ledger_url = postgres.create_database(f"avro_{sink}_{uuid.uuid4().hex[:8]}") if sink == "postgres" else None
    # the suffix names the format too: the pipeline's name (and so its topic) must differ per parameter
    p = avro_pipeline(make_pipeline, registry_url, version=1, kind=kind, suffix=f"_{sink[:2]}_{kind[:2]}", ledger_url=ledger_url,
                      sink=settings, transform={"sql": TRANSFORM})
    if sink == "iceberg":
        cfg = yaml.safe_load(p.config_path.read_text())
        cfg["sink"]["warehouse"] = str(p.root / "warehouse")
        p.config_path.write_text(yaml.safe_dump(cfg))
        p.cfg = load_config(p.config_path)
        url = f"sqlite:///{p.root}/ledger.iceberg.db"
        return p, lambda cols: verify.iceberg_rows(url, f"sample.{table}", cols), \
            lambda: verify.check_iceberg(url, f"sample.{table}", p.expected_ids(), p.malformed(), p.ledger, p.name)
    return p, lambda cols: verify.table_rows(ledger_url, f"public.{table}", cols), \
        lambda: verify.check_table(ledger_url, f"public.{table}", p.expected_ids(), p.malformed(), p.ledger, p.name)


@pytest.mark.parametrize("kind", ["avro", "protobuf"])
@pytest.mark.parametrize("sink", ["iceberg", "postgres"])
def test_a_field_added_by_the_reader_becomes_a_nullable_column_on_replay(make_pipeline, postgres, sink, kind):
    events = sample_events(kind)
    referrer_of = events.referrer_of
    with SchemaRegistryServer() as registry:
        p, rows, check = _pipeline(make_pipeline, sink, registry.url, postgres, kind)
        v1 = produce_avro(p, registry.url, events.EVENT_V1, "prefix", 200, seed=1, start=BASE, kind=kind)
        v2 = produce_avro(p, registry.url, events.EVENT_V2, "header", 200, seed=2, start=BASE, kind=kind)
        first = p.run(BASE)
        assert first.ok, first.output[-4000:]
        report = check()
        assert report.ok and report.rejected_expected > 0, report.summary()
        assert {r[0]: r[1] for r in rows(["event_id", "user_id"])} == {
            i: e["user_id"] for i, e in {**v1, **v2}.items()}

        set_reader_version(p, "latest")
        replay = p.run(None, conf={"mode": "replay", "batch_ids": "1", "reason": "reader schema v2"})
        assert replay.ok, replay.output[-4000:]
        report = check()
        assert report.ok, report.summary()
        got = dict(rows(["event_id", "referrer"]))
        assert got == {i: (referrer_of(e) if i in v2 else None) for i, e in {**v1, **v2}.items()}
        assert any(got.values())


def test_a_replay_decodes_with_the_writers_its_batch_was_planned_with(make_pipeline):
    """Issue 41, case 7: after batch 1 committed, its writer version was soft-deleted (no longer
    listed by the subject; its id still resolves) and v2 registered. The replay of batch 1 decodes
    with the writers it was planned with as well as today's: every record it accepted is still in
    the table (read with pyarrow), none turned into a rejection that replaced it."""
    with SchemaRegistryServer() as registry:
        p = avro_pipeline(make_pipeline, registry.url, version="latest", suffix="_sd")
        produce_avro(p, registry.url, EVENT_V1, "prefix", 200, seed=1, start=BASE)
        first = p.run(BASE)
        assert first.ok, first.output[-4000:]
        accepted = p.ledger.get_batch(p.name, 1).stats["rows_out"]

        subject = f"{p.topic}-value"
        registry.register(subject, EVENT_V2)
        registry.soft_delete(subject, 1)
        replay = p.run(None, conf={"mode": "replay", "batch_ids": "1", "reason": "writer v1 soft-deleted"})
        assert replay.ok, replay.output[-4000:]
        assert "no longer listed by the registry, kept from the replayed batch's plan" in replay.output
        table = pads.dataset(p.table, format="parquet", partitioning="hive", ignore_prefixes=["_", "."]).to_table()
        assert sorted(table.column("event_id").to_pylist()) == sorted(p.expected_ids())
        assert table.num_rows == accepted == p.ledger.get_batch(p.name, 2).stats["rows_out"]
        report = p.check()
        assert report.ok, report.summary()

