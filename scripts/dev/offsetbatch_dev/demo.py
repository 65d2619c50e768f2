"""README command (a): the sample pipeline end to end on the embedded defaults.

Starts the local broker, resets the sample pipeline's own state (its topic, ledger rows, table),
produces events over three simulated hours, runs three hourly DAG runs with ``airflow dags test``,
prints the ledger and the output, and ends with the exactly-once check.

``DEMO_SINK=iceberg`` (``make demo SINK=iceberg``) runs the Iceberg variant instead
(``include/pipelines/iceberg``): the table is read back with pyiceberg, snapshot by snapshot.

``DEMO_FORMAT=avro`` (``make demo FORMAT=avro``) runs it on Confluent-framed Avro values instead
(``offsetbatch_dev.demo_avro``): a stand-in schema registry in a subprocess, the events written by
confluent-kafka's ``AvroSerializer`` in two schema versions and both wire forms.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta, timezone
from pathlib import Path

from kafka import KafkaAdminClient
from rich.console import Console

from offsetbatch import storage
from offsetbatch.config import PIPELINES_DIR, load_config
from offsetbatch.ledger import Ledger
from offsetbatch.ledger.schema import batches, events, frontier, gaps, ranges
from offsetbatch.ops import report
from offsetbatch.ops.status import pipeline_status
from offsetbatch.pipeline import Pipeline
from offsetbatch.paths import local_dir
from offsetbatch.sinks.iceberg.catalog import catalog_url
from offsetbatch.source.admin import KafkaAdmin
from offsetbatch_dev import demo_avro, verify
from offsetbatch_dev.sample.avro_events import MALFORMED as AVRO_MALFORMED
from offsetbatch_dev.sample.producer import produce
from offsetbatch_dev.stack.kafka_broker import KafkaBroker

console = Console(width=max(Console().width, 120))
HOURS = 3


def _reset(cfg, ledger: Ledger, bootstrap: str) -> None:
    """Forget everything the sample pipeline did before, so the demo is repeatable."""
    with ledger.engine.begin() as conn:
        for t in (ranges, batches, frontier, gaps, events):
            conn.execute(t.delete().where(t.c.pipeline == cfg.name))
    storage.remove(cfg.sink.root)
    if cfg.sink.type == "iceberg":
        _drop_iceberg_tables(cfg)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        present = set(admin.list_topics()) & set(cfg.kafka.topics)
        if present:
            admin.delete_topics(list(present))
            deadline = time.monotonic() + 60
            while set(admin.list_topics()) & present and time.monotonic() < deadline:
                time.sleep(0.2)
    finally:
        admin.close()


def _drop_iceberg_tables(cfg) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(cfg.sink.catalog_name, uri=catalog_url(cfg.sink, cfg.name))
    try:
        for ident in (cfg.sink.identifier, cfg.sink.rejected_identifier):
            if catalog.table_exists(ident):
                storage.remove(catalog.load_table(ident).location())
                catalog.drop_table(ident)
    finally:
        catalog.engine.dispose()


def _avro() -> bool:
    """Whether ``make demo FORMAT=avro`` asked for Avro values (only on the files sink)."""
    fmt = os.environ.get("DEMO_FORMAT", "") or "json"
    if fmt not in ("json", "avro"):
        raise SystemExit(f"DEMO_FORMAT (make demo FORMAT=...) is 'json' or 'avro', not {fmt!r}")
    if fmt == "avro" and os.environ.get("DEMO_SINK", "") not in ("", "files"):
        raise SystemExit("make demo FORMAT=avro runs on the files sink only: leave SINK unset")
    return fmt == "avro"


def _install(variant: Path) -> None:
    """Add a variant's config (file or folder) to the pipelines this process and its ``airflow dags
    test`` runs read."""
    os.environ["OFFSETBATCH_PIPELINES"] = os.pathsep.join(
        [os.environ.get("OFFSETBATCH_PIPELINES", str(PIPELINES_DIR)), str(variant)])


def _pipeline() -> str:
    """The sample pipeline's config, or its Iceberg or Avro variant's (installed for this process and
    the ``airflow dags test`` runs it starts)."""
    if _avro():
        config = demo_avro.write_config(local_dir() / "demo")
        _install(config)
        return str(config)
    if os.environ.get("DEMO_SINK", "") in ("", "files"):
        return str(PIPELINES_DIR / "sample_events.yaml")
    if os.environ["DEMO_SINK"] != "iceberg":
        raise SystemExit(f"DEMO_SINK (make demo SINK=...) is 'files' or 'iceberg', not {os.environ['DEMO_SINK']!r}")
    variant = PIPELINES_DIR / "iceberg"
    _install(variant)
    return str(variant / "sample_events_iceberg.yaml")


def main() -> int:
    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    took = broker.start()
    console.print(f"[bold]1.[/] Kafka broker ready on {broker.bootstrap} ({took:.1f}s)")
    cfg = load_config(_pipeline())
    logs = local_dir() / "demo"
    logs.mkdir(parents=True, exist_ok=True)
    registry: AbstractContextManager[str | None] = demo_avro.registry(logs) if _avro() else nullcontext()
    # the demo starts the sample pipeline afresh; the registry (Avro) is stopped on any way out
    with Pipeline(cfg).ledger(create=True) as ledger, registry as registry_url:
        _reset(cfg, ledger, broker.bootstrap)

        first_hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) - timedelta(hours=HOURS + 1)
        avro: dict = {}
        if registry_url is not None:
            os.environ[demo_avro.CONN_ENV] = demo_avro.connection(registry_url)  # for the `airflow dags test` runs
            switch = first_hour + timedelta(hours=HOURS / 2)
            avro = {"encoder": demo_avro.encoder(registry_url, switch), "malformed_values": AVRO_MALFORMED}
            console.print(f"   schema registry stand-in (tests/schema_registry_server.py) ready on {registry_url}; "
                          f"Avro values: EVENT_V1 in the prefix form before {switch:%H:%M}Z, EVENT_V2 in the header form from then")
        console.print(f"[bold]2.[/] Producing sample events to {cfg.kafka.topics[0]} for {HOURS} simulated hours from {first_hour:%Y-%m-%d %H:%M}Z")
        produced = produce(broker.bootstrap, cfg.kafka.topics[0], int(os.environ.get("DEMO_RECORDS", "20000")),
                           partitions=4, start=first_hour, hours=HOURS, malformed_fraction=0.01, **avro)
        console.print(f"   produced {produced.total} records: {len(produced.valid_ids)} valid, {len(produced.malformed)} malformed")

        console.print(f"[bold]3.[/] Running {HOURS} hourly DAG runs of {cfg.dag_id} with `airflow dags test` (logs in {logs})")
        for i in range(1, HOURS + 1):
            logical = first_hour + timedelta(hours=i - 1)  # a run at logical date L reads [L, L+1h)
            t0 = time.monotonic()
            log_file = logs / f"run-{i}.log"
            with open(log_file, "w") as out:
                rc = subprocess.run(["airflow", "dags", "test", cfg.dag_id, logical.isoformat()], stdout=out, stderr=subprocess.STDOUT).returncode
            b = ledger.list_batches(cfg.name, 1)
            b = b[0] if b else None
            if rc != 0 or b is None or b.status != "committed":
                console.print(f"[red]run {i} failed (exit {rc}); see {log_file}[/]")
                console.print("".join(Path(log_file).read_text().splitlines(keepends=True)[-40:]))
                return 1
            console.print(f"   run {i}: interval [{logical:%H:%M}, {logical + timedelta(hours=1):%H:%M}) -> batch {b.batch_id}, "
                          f"{b.records} records, {b.stats['rows_out']} rows out, {b.stats['rows_rejected']} rejected, "
                          f"whole DAG run {time.monotonic() - t0:.1f}s (Spark job {b.stats['job_seconds']:.1f}s)")

        console.print("[bold]4.[/] Ledger")
        with KafkaAdmin(broker.bootstrap) as kafka:
            st = pipeline_status(Pipeline(cfg), ledger, kafka, batches=HOURS)
        console.print(report.batches_table(f"{cfg.name}: batches", st.batches))
        console.print(report.ranges_table(f"{cfg.name}: ranges [from, until)", list(reversed(st.batches))))
        console.print(report.status_table(st))
        if cfg.sink.type == "iceberg":
            url = catalog_url(cfg.sink, cfg.name)
            table = verify.iceberg_table(url, ".".join(cfg.sink.identifier))
            for snap in sorted(table.snapshots(), key=lambda s: s.sequence_number):
                props = snap.summary.additional_properties
                console.print(f"   snapshot {snap.snapshot_id} ({snap.summary.operation.value}): batch "
                              f"{props.get('offsetbatch.batch-id')}, {props.get('offsetbatch.rows-out')} rows, ranges "
                              f"{props.get('offsetbatch.ranges', '')[:100]}…")
            console.print(f"[bold]5.[/] Exactly-once check of {'.'.join(cfg.sink.identifier)}, read with pyiceberg "
                          f"(ids vs produced ids, {cfg.sink.table}_rejected vs malformed offsets)")
            result = verify.check_iceberg(url, ".".join(cfg.sink.identifier), produced.valid_ids, produced.malformed,
                                          ledger, cfg.name)
        else:
            per_batch = verify.output_batches(cfg.sink.path)
            console.print(f"   output rows per batch in {cfg.sink.path}: "
                          + ", ".join(f"batch {k}: {v}" for k, v in sorted(per_batch.items())))
            if registry_url is not None:
                console.print("   " + demo_avro.schemas_line(ledger, cfg.name, registry_url))
            console.print("[bold]5.[/] Exactly-once check (output ids vs produced ids, rejected vs malformed offsets)")
            result = verify.check(cfg.sink.path, produced.valid_ids, produced.malformed, ledger, cfg.name)
        console.print(("   [green]" if result.ok else "   [red]") + result.summary() + "[/]")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
