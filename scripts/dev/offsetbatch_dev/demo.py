"""README command (a): the sample pipeline end to end on the embedded defaults.

Starts the local broker and the Spark Connect server the sample pipeline runs its job on (the
default runner; logs under ``$OFFSETBATCH_HOME/kafka`` and ``$OFFSETBATCH_HOME/spark-connect``),
resets the sample pipeline's own state (its topic, ledger rows, table), produces events over three
simulated hours, runs three hourly DAG runs as ``airflow dags test`` does, prints the ledger and
the output, and ends with the exactly-once check. The runs share one process: Airflow imported, the
DAGs parsed and its in-process execution API started once (about 10 s of a 2-core machine that an
``airflow dags test`` process pays before its first task), so a run's time is the DAG run's own.

``DEMO_SINK=iceberg`` (``make demo SINK=iceberg``) runs the Iceberg variant instead
(``include/pipelines/iceberg``): the table is read back with pyiceberg, snapshot by snapshot;
``DEMO_SINK=delta`` the Delta Lake variant (``include/pipelines/delta``), read back with Polars and
its commits listed from the Delta log.

``DEMO_FORMAT=avro`` (``make demo FORMAT=avro``) runs it on Confluent-framed Avro values instead
(``offsetbatch_dev.demo_avro``): a stand-in schema registry in a subprocess, the events written by
confluent-kafka's ``AvroSerializer`` in two schema versions and both wire forms. ``DEMO_FORMAT=protobuf``
does the same with Confluent-framed Protobuf values (``value.format: confluent-protobuf``).
"""

from __future__ import annotations

import os
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
from offsetbatch_dev.sample.producer import produce
from offsetbatch_dev.stack.kafka_broker import KafkaBroker
from offsetbatch_dev.stack.spark_connect import DEFAULT_PORT as CONNECT_PORT
from offsetbatch_dev.stack.spark_connect import SparkConnectServer

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
    if cfg.sink.type == "delta":
        for location in (cfg.sink.table, cfg.sink.rejected_table):
            storage.remove(location)
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


def _registry_kind() -> str | None:
    """The registry format ``make demo FORMAT=avro`` or ``FORMAT=protobuf`` asked for (only on the
    files sink), or None for the JSON demo."""
    fmt = os.environ.get("DEMO_FORMAT", "") or "json"
    if fmt not in ("json", "avro", "protobuf"):
        raise SystemExit(f"DEMO_FORMAT (make demo FORMAT=...) is 'json', 'avro' or 'protobuf', not {fmt!r}")
    if fmt != "json" and os.environ.get("DEMO_SINK", "") not in ("", "files"):
        raise SystemExit(f"make demo FORMAT={fmt} runs on the files sink only: leave SINK unset")
    return None if fmt == "json" else fmt


def _install(variant: Path) -> None:
    """Add a variant's config (file or folder) to the pipelines this process and its ``airflow dags
    test`` runs read."""
    os.environ["OFFSETBATCH_PIPELINES"] = os.pathsep.join(
        [os.environ.get("OFFSETBATCH_PIPELINES", str(PIPELINES_DIR)), str(variant)])


def _pipeline() -> str:
    """The sample pipeline's config, or its Iceberg or Avro variant's (installed for this process and
    the ``airflow dags test`` runs it starts)."""
    if _registry_kind():
        config = demo_avro.write_config(local_dir() / "demo", _registry_kind())
        _install(config)
        return str(config)
    if os.environ.get("DEMO_SINK", "") in ("", "files"):
        return str(PIPELINES_DIR / "sample_events.yaml")
    sink = os.environ["DEMO_SINK"]
    if sink not in ("iceberg", "delta"):
        raise SystemExit(f"DEMO_SINK (make demo SINK=...) is 'files', 'iceberg' or 'delta', not {sink!r}")
    variant = PIPELINES_DIR / sink
    _install(variant)
    return str(variant / f"sample_events_{sink}.yaml")


class DagRuns:
    """The demo's DAG runs in this process, each as ``airflow dags test`` runs one (its tasks in
    process, against the metadata database), its output in its own log file."""

    def __init__(self, dag_id: str) -> None:
        from airflow.dag_processing.dagbag import DagBag
        from airflow.sdk.execution_time.supervisor import in_process_api_server

        bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
        if dag_id not in bag.dags:
            raise SystemExit(f"DAG {dag_id} not found; import errors: {bag.import_errors}")
        self.dag = bag.dags[dag_id]
        import httpx

        # the in-process execution API builds its routes on its first request: now, not in the first run
        with httpx.Client(transport=in_process_api_server().transport, base_url="http://in-process/execution/") as client:
            client.get("health")

    def run(self, logical: datetime, log_file: Path) -> int:
        """Exit code 0 when the run succeeded; stdout and stderr (file descriptors: Spark's too) to ``log_file``."""
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        with open(log_file, "w") as out:
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            try:
                state = str(self.dag.test(logical_date=logical).state)
            except Exception:  # noqa: BLE001 - reported as the run's failure, in its log
                import traceback

                traceback.print_exc()
                state = "failed"
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                for fd in saved:
                    os.close(fd)
        return 0 if state in ("success", "DagRunState.SUCCESS") else 1


def _spark_connect(cfg, bootstrap: str) -> None:
    """The Spark Connect server the pipeline's job runs on (spark.runner: connect), as ``make
    stack-up`` starts it: on SPARK_CONNECT_PORT, the port of scripts/env.sh's spark_connect_default."""
    if not cfg.spark.on_connect:
        console.print(f"   the pipeline runs its job with spark-submit (spark.runner), through {cfg.spark.conn_id}")
        return
    server = SparkConnectServer(port=int(os.environ.get("SPARK_CONNECT_PORT", CONNECT_PORT)))
    running = server.pid() is not None
    took = server.start(kafka_bootstrap=bootstrap)
    console.print(f"   Spark Connect server {server.url} " + ("already running" if running else f"ready and warmed up ({took:.1f}s)")
                  + f", pid {server.pid()}; its log {server.log_file}; the pipeline's job runs there "
                  f"({cfg.spark.connect_conn_id})")


def main() -> int:
    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    took = broker.start()
    console.print(f"[bold]1.[/] Kafka broker ready on {broker.bootstrap} ({took:.1f}s); its log {broker.log_file}")
    cfg = load_config(_pipeline())
    _spark_connect(cfg, broker.bootstrap)
    logs = local_dir() / "demo"
    logs.mkdir(parents=True, exist_ok=True)
    kind = _registry_kind()
    registry: AbstractContextManager[str | None] = demo_avro.registry(logs) if kind else nullcontext()
    # the demo starts the sample pipeline afresh; the registry (Avro, Protobuf) is stopped on any way out
    with Pipeline(cfg).ledger(create=True) as ledger, registry as registry_url:
        _reset(cfg, ledger, broker.bootstrap)

        first_hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) - timedelta(hours=HOURS + 1)
        avro: dict = {}
        if registry_url is not None:
            os.environ[demo_avro.CONN_ENV] = demo_avro.connection(registry_url)  # for the `airflow dags test` runs
            switch = first_hour + timedelta(hours=HOURS / 2)
            avro = {"encoder": demo_avro.encoder(registry_url, switch, kind), "malformed_values": demo_avro.malformed(kind)}
            console.print(f"   schema registry stand-in (tests/schema_registry_server.py) ready on {registry_url}; "
                          f"{'Protobuf' if kind == 'protobuf' else 'Avro'} values: EVENT_V1 in the prefix form before "
                          f"{switch:%H:%M}Z, EVENT_V2 in the header form from then")
        console.print(f"[bold]2.[/] Producing sample events to {cfg.kafka.topics[0]} for {HOURS} simulated hours from {first_hour:%Y-%m-%d %H:%M}Z")
        produced = produce(broker.bootstrap, cfg.kafka.topics[0], int(os.environ.get("DEMO_RECORDS", "20000")),
                           partitions=4, start=first_hour, hours=HOURS, malformed_fraction=0.01, **avro)
        console.print(f"   produced {produced.total} records: {len(produced.valid_ids)} valid, {len(produced.malformed)} malformed")

        t0 = time.monotonic()
        runs = DagRuns(cfg.dag_id)
        console.print(f"[bold]3.[/] Running {HOURS} hourly DAG runs of {cfg.dag_id} as `airflow dags test` does "
                      f"(Airflow ready in {time.monotonic() - t0:.1f}s; logs in {logs})")
        for i in range(1, HOURS + 1):
            logical = first_hour + timedelta(hours=i - 1)  # a run at logical date L reads [L, L+1h)
            t0 = time.monotonic()
            log_file = logs / f"run-{i}.log"
            rc = runs.run(logical, log_file)
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
        elif cfg.sink.type == "delta":
            from deltalake import DeltaTable

            for h in reversed(DeltaTable(cfg.sink.table).history()):
                console.print(f"   version {h['version']} ({h['operation']}): batch {h.get('offsetbatch.batch-id')}, "
                              f"{h.get('offsetbatch.rows-out')} rows, ranges {h.get('offsetbatch.ranges', '')[:100]}…")
            console.print(f"[bold]5.[/] Exactly-once check of {cfg.sink.table}, read with Polars (ids vs produced ids, "
                          f"{cfg.sink.rejected_table} vs malformed offsets)")
            result = verify.check_delta(cfg.sink.table, produced.valid_ids, produced.malformed, ledger, cfg.name)
        else:
            per_batch = verify.output_batches(cfg.sink.path)
            console.print(f"   output rows per batch in {cfg.sink.path}: "
                          + ", ".join(f"batch {k}: {v}" for k, v in sorted(per_batch.items())))
            if registry_url is not None:
                console.print("   " + demo_avro.schemas_line(ledger, cfg.name, registry_url, kind))
            console.print("[bold]5.[/] Exactly-once check (output ids vs produced ids, rejected vs malformed offsets)")
            result = verify.check(cfg.sink.path, produced.valid_ids, produced.malformed, ledger, cfg.name)
        console.print(("   [green]" if result.ok else "   [red]") + result.summary() + "[/]")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
