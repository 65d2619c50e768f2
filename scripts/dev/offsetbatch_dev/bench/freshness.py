"""Freshness under the lag trigger (issue 42): how long a record takes from its producer to a
reader of the sink, at a steady rate, on the real scheduler, triggerer and Spark Connect.

    python -m offsetbatch_dev.bench.freshness [--minutes 10] [--rates 2000,200] [--sinks files,iceberg]

Per rate: a producer (confluent-kafka) writes JSON sample events at a steady rate for
``--minutes`` to a topic of ``--partitions`` partitions, while one pipeline per sink reads it under
its lag trigger (``min_records`` = ``--count-seconds`` of records at that rate, ``max_delay``,
``poll``; no cron): ``airflow api-server``, ``scheduler`` (LocalExecutor) and ``triggerer``, Airflow's
metadata in the local PostgreSQL, every Spark job on one Spark Connect server. The producer stops;
the pipelines drain what is left; then, for every record:

* latency = the moment it became visible to a reader of the sink minus its produce time (its Kafka
  timestamp, CreateTime, stamped by the producer). Visible: files, its batch published (the
  ledger's ``published_at``, set once the manifest swap is done); Iceberg, the snapshot that holds
  it current (the snapshot's ``timestamp-ms``, read with pyiceberg).
* exactly once: the sink read with a reader not ours (pyarrow over the files; pyiceberg), every
  produced id present once.

The hourly schedule's figures beside them are not measured (an hour per point): with records
arriving evenly, a record waits for the next hour's run, so its latency is at least the time to the
hour: p50 30 min, p95 57 min, max 60 min, plus that run's own duration. Results go to
docs/benchmarks.md between the ``freshness`` markers. It refuses a busy machine (``--allow-load``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml
from rich.console import Console
from rich.table import Table

from offsetbatch.paths import local_dir

from offsetbatch_dev import PROJECT_ROOT, verify
from offsetbatch_dev.bench import quiet, report
from offsetbatch_dev.sample.producer import ensure_topic, make_event
from offsetbatch_dev.stack.airflow_services import AirflowServices
from offsetbatch_dev.stack.kafka_broker import KafkaBroker
from offsetbatch_dev.stack.postgres import PostgresCluster
from offsetbatch_dev.stack.spark_connect import SparkConnectServer

CONNECT_CONN = "spark_connect_fresh"
API_PORT = 18290
CONNECT_PORT = 15290
TARGET_P95_S = {"files": 60.0, "iceberg": 90.0}
SCHEMA = "event_id STRING, kind STRING, user_id INT, page STRING, event_time TIMESTAMP, amount DOUBLE"


@dataclass
class Produced:
    """What the producer wrote: per partition, the offsets and their Kafka timestamps (ms)."""

    ids: set[str] = field(default_factory=set)
    stamps: dict[int, dict[int, int]] = field(default_factory=dict)  # partition -> offset -> CreateTime ms
    failed: int = 0

    def add(self, partition: int, offset: int, ts_ms: int) -> None:
        self.stamps.setdefault(partition, {})[offset] = ts_ms


def produce_steadily(bootstrap: str, topic: str, rate: int, seconds: float, partitions: int, prefix: str,
                     console: Console) -> Produced:
    """``rate`` records a second for ``seconds``, sent in 10 ms ticks (so the rate is steady at the
    second's scale), each stamped by the producer when sent."""
    import random

    from confluent_kafka import Producer

    out = Produced()
    lock = threading.Lock()

    def delivered(err, msg) -> None:
        with lock:
            if err is not None:
                out.failed += 1
            else:
                out.add(msg.partition(), msg.offset(), msg.timestamp()[1])

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True})
    rng = random.Random(42)
    tick, seq = 0.01, 0
    started = time.monotonic()
    next_report = started + 60
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(elapsed * rate) + 1
        while seq < due:
            event = make_event(rng, seq, datetime.now(timezone.utc), prefix)
            producer.produce(topic, json.dumps(event).encode(), key=str(event["user_id"]).encode(),
                             partition=seq % partitions, on_delivery=delivered)
            out.ids.add(event["event_id"])
            seq += 1
        producer.poll(0)
        if time.monotonic() >= next_report:
            console.log(f"produced {seq:,} records in {elapsed:.0f} s ({seq / elapsed:,.0f}/s)")
            next_report += 60
        time.sleep(max(0.0, started + (int(elapsed / tick) + 1) * tick - time.monotonic()))
    producer.flush(60)
    if out.failed:
        raise RuntimeError(f"{out.failed} of {seq} records were not delivered to {topic}; the measurement is void")
    return out


def triggered_pipeline(name: str, topic: str, sink: dict, ledger_url: str, rule: dict,
                       connect_conn: str = CONNECT_CONN) -> dict:
    """The config of a lag-triggered pipeline on the bench's events (``SCHEMA``), its job on the
    Spark Connect server of ``connect_conn``: the freshness and fleet benches' pipelines."""
    return {
        "name": name,
        "kafka": {"conn_id": "kafka_default", "topics": [topic]},
        "starting_policy": "earliest",
        "value": {"format": "json", "schema": SCHEMA, "required": ["event_id", "kind", "event_time"]},
        "transform": {"sql": "SELECT event_id, kind, user_id, page, event_time, amount, kafka_partition, kafka_offset "
                             "FROM records"},
        "sink": sink,
        "ledger": {"url": ledger_url},
        "spark": {"connect_conn_id": connect_conn, "conf": {"spark.sql.shuffle.partitions": "2"}},
        "airflow": {"schedule": None, "retries": 2, "retry_delay_seconds": 5, "trigger": rule},
    }


def pipeline_config(work: Path, name: str, topic: str, sink: str, rate: int, args) -> Path:
    root = work / name
    sink_cfg: dict = {"path": str(root / "table"), "event_time_column": "event_time"}
    if sink == "iceberg":
        sink_cfg = {"type": "iceberg", "staging": str(root / "staging"), "namespace": "fresh", "table": name,
                    "warehouse": str(root / "warehouse")}
    rule = {"min_records": max(1, int(rate * args.count_seconds)), "max_delay": args.max_delay, "poll": args.poll}
    cfg = triggered_pipeline(name, topic, sink_cfg, f"sqlite:///{root}/ledger.db", rule)
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


_LEDGERS: dict = {}


def ledger_of(pipeline):
    """The pipeline's ledger, opened once; None before its first run created it."""
    from offsetbatch.ledger.errors import LedgerMissingError

    if pipeline.name not in _LEDGERS:
        try:
            _LEDGERS[pipeline.name] = pipeline.ledger()
        except LedgerMissingError:
            return None
    return _LEDGERS[pipeline.name]


def visible_at(pipeline, sink: str) -> dict[int, float]:
    """Batch id -> when its rows became visible to a reader (epoch seconds)."""
    batches = ledger_of(pipeline).list_batches(pipeline.name, 100_000)
    if sink == "files":
        return {b.batch_id: b.stats["published_at"].replace(tzinfo=timezone.utc).timestamp()
                for b in batches if b.status == "committed" and b.stats.get("published_at")}
    from offsetbatch.sinks.iceberg.catalog import catalog_url

    s = pipeline.cfg.sink
    table = verify.iceberg_table(catalog_url(s, pipeline.name), f"{s.namespace}.{s.table}")
    return {int(snap.summary["offsetbatch.batch-id"]): snap.timestamp_ms / 1000
            for snap in table.metadata.snapshots if snap.summary and snap.summary["offsetbatch.batch-id"]}


def latencies(pipeline, produced: Produced, visible: dict[int, float]) -> tuple[np.ndarray, list[dict]]:
    """Every produced record's latency (s), through the batch whose range holds it; and per batch
    (records, planned, visible) for runs per hour and where the time went."""
    out, per_batch = [], []
    for b in ledger_of(pipeline).list_batches(pipeline.name, 100_000):
        if b.status != "committed":
            continue
        seen = visible[b.batch_id]
        planned = b.stats["planned_at"].replace(tzinfo=timezone.utc).timestamp()
        stamps = []
        for r in b.ranges:
            part = produced.stamps.get(r.partition, {})
            stamps += [part[o] for o in range(r.from_offset, r.until_offset) if o in part]
        lat = seen - np.array(stamps, dtype=float) / 1000
        out.append(lat)
        per_batch.append({"batch": b.batch_id, "records": b.records, "planned": planned, "visible": seen,
                          "oldest_wait_s": float(planned - min(stamps) / 1000) if stamps else None,
                          "plan_to_visible_s": seen - planned})
    return (np.concatenate(out) if out else np.array([])), per_batch


TASKS = ("plan", "spark_job", "commit")


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def run_costs(services: AirflowServices, dag_id: str) -> dict[str, float]:
    """Medians over the DAG's successful runs, from Airflow's own records: run wall, Spark job,
    overhead (wall minus the Spark job), each task's duration, and what Airflow spent between
    them (run start to the plan task's start, task end to the next task's start, the last task's
    end to the run's end)."""
    per_run: list[dict[str, float]] = []
    for run in services.runs(dag_id):
        if run["state"] != "success" or not run.get("start_date") or not run.get("end_date"):
            continue
        status, body = services.rest("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run['run_id']}/taskInstances")
        tis = {ti["task_id"]: ti for ti in body["task_instances"]}
        if not all(tis.get(t, {}).get("start_date") and tis[t].get("end_date") for t in TASKS):
            continue
        start, end = _at(run["start_date"]), _at(run["end_date"])
        row = {"wall": (end - start).total_seconds()}
        gaps, previous = 0.0, start
        for t in TASKS:
            t_start, t_end = _at(tis[t]["start_date"]), _at(tis[t]["end_date"])
            row[t] = (t_end - t_start).total_seconds()
            gaps += (t_start - previous).total_seconds()
            previous = t_end
        row["airflow"] = gaps + (end - previous).total_seconds()
        row["overhead"] = row["wall"] - row["spark_job"]
        per_run.append(row)
    if not per_run:
        return {"runs": 0}
    med = {k: statistics.median(r[k] for r in per_run) for k in per_run[0]}
    return {"runs": len(per_run), "wall_s": med["wall"], "job_s": med["spark_job"], "overhead_s": med["overhead"],
            "plan_s": med["plan"], "commit_s": med["commit"], "airflow_s": med["airflow"]}


def wait_for_trigger(services: AirflowServices, name: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while f"pipeline {name}: lag trigger watching" not in services.log("triggerer"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the triggerer did not start {name}'s lag trigger in {timeout_s:.0f} s")
        time.sleep(0.5)  # polling the triggerer's log


def drained(pipeline, services: AirflowServices, produced: Produced) -> bool:
    """Every produced offset is below the frontier and no run is queued or running."""
    ledger = ledger_of(pipeline)
    if ledger is None:
        return False
    ends = {p: max(o) + 1 for p, o in produced.stamps.items()}
    front = {r["partition"]: r["next_offset"] for r in ledger.frontier_rows(pipeline.name)}
    idle = all(r["state"] in ("success", "failed") for r in services.runs(pipeline.cfg.dag_id))
    return idle and all(front.get(p, 0) >= end for p, end in ends.items())


def measure_rate(rate: int, args, work: Path, env: dict, bootstrap: str, console: Console) -> list[dict]:
    from offsetbatch.pipeline import Pipeline
    from offsetbatch.sinks.iceberg.catalog import catalog_url

    topic = f"fresh-{rate}-{int(time.time())}"
    ensure_topic(bootstrap, topic, args.partitions)
    dags = Path(env["AIRFLOW__CORE__DAGS_FOLDER"])
    pipelines = {}
    for sink in args.sinks.split(","):
        name = f"fresh_{sink}_{rate}"
        path = pipeline_config(work, name, topic, sink, rate, args)
        # "airflow" and "dag" in the text: Airflow's safe mode skips Python files without both
        (dags / f"{name}.py").write_text(f"# Airflow DAG of the freshness benchmark\nfrom offsetbatch.dag.factory import "
                                         f"pipeline_dag\n\ndag = pipeline_dag({str(path)!r})\n")
        pipelines[sink] = Pipeline.load(path)
    services = AirflowServices(env, work / "airflow-services", port=API_PORT, triggerer=True)
    services.start()
    try:
        services.airflow("dags", "reserialize")
        for p in pipelines.values():
            services.airflow("pools", "set", p.cfg.pool, "1", f"offsetbatch pipeline {p.name}")
            services.airflow("dags", "unpause", p.cfg.dag_id)
        services.airflow("dags", "reserialize")  # the watchers register for unpaused DAGs
        for p in pipelines.values():
            wait_for_trigger(services, p.name)
        console.log(f"{rate:,} records/s for {args.minutes} min to {topic} ({args.partitions} partitions); "
                    f"pipelines {', '.join(p.name for p in pipelines.values())} under their lag triggers")
        produced = produce_steadily(bootstrap, topic, rate, args.minutes * 60, args.partitions, f"r{rate}-", console)
        console.log(f"produced {len(produced.ids):,} records; draining")
        deadline = time.monotonic() + 600
        while not all(drained(p, services, produced) for p in pipelines.values()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the pipelines did not drain {topic} within 10 min after the producer stopped")
            time.sleep(2)  # polling the ledgers and the REST API
        rows = []
        for sink, p in pipelines.items():
            check = (verify.check(p.cfg.sink.root, produced.ids, None, None, None) if sink == "files" else
                     verify.check_iceberg(catalog_url(p.cfg.sink, p.name), f"{p.cfg.sink.namespace}.{p.cfg.sink.table}",
                                          produced.ids))
            lat, per_batch = latencies(p, produced, visible_at(p, sink))
            costs = run_costs(services, p.cfg.dag_id)
            failed = [r["run_id"] for r in services.runs(p.cfg.dag_id) if r["state"] != "success"]
            hours = args.minutes / 60
            during = [b for b in per_batch if b["planned"] <= per_batch[0]["planned"] + args.minutes * 60]
            rows.append({
                "rate": rate, "sink": sink, "records": len(produced.ids), "latency_records": int(lat.size),
                "p50": float(np.percentile(lat, 50)), "p95": float(np.percentile(lat, 95)), "max": float(lat.max()),
                "runs": len(per_batch), "runs_per_hour": len(during) / hours,
                "records_per_run": statistics.median(b["records"] for b in per_batch),
                "wait_p50": statistics.median(b["oldest_wait_s"] for b in per_batch if b["oldest_wait_s"] is not None),
                "plan_to_visible_p50": statistics.median(b["plan_to_visible_s"] for b in per_batch),
                "missing": len(check.missing), "duplicates": sum(check.duplicates.values()) if check.duplicates else 0,
                "failed_runs": failed, **{f"run_{k}": v for k, v in costs.items()},
            })
            console.log(f"{sink} at {rate}/s: p50 {rows[-1]['p50']:.1f} s, p95 {rows[-1]['p95']:.1f} s, max "
                        f"{rows[-1]['max']:.1f} s over {lat.size:,} records in {len(per_batch)} runs; missing "
                        f"{rows[-1]['missing']}, duplicated {rows[-1]['duplicates']}, failed runs {len(failed)}")
        return rows
    finally:
        for p in pipelines.values():
            services.airflow("dags", "pause", p.cfg.dag_id, check=False)
        services.stop()


def section(rows: list[dict], args, command: str, warning: str | None) -> list[str]:
    lines = [
        "## Freshness under the lag trigger (issue 42)",
        "",
        f"`{command}`, {time.strftime('%Y-%m-%d')}. {report.machine()}. Per rate, a producer writes JSON sample events "
        f"steadily for {args.minutes} min to {args.partitions} partitions while one pipeline per sink reads the topic "
        f"under its lag trigger (`min_records` = {args.count_seconds:g} s of records, `max_delay: {args.max_delay}`, "
        f"`poll: {args.poll}`, no cron) on the real scheduler (LocalExecutor), triggerer and API server; every Spark "
        f"job on one Spark Connect server (`local[2]`), both pipelines at once on this 2-core machine. Latency = when "
        f"the record became visible to a reader (files: its batch published; Iceberg: its snapshot's `timestamp-ms`) "
        f"minus its Kafka timestamp (stamped by the producer), for every record.",
        "",
    ]
    if warning:
        lines += [f"**Measured on a busy machine:** {warning}.", ""]
    lines += [
        "| rate (records/s) | sink | records | p50 (s) | p95 (s) | max (s) | target p95 | runs/h | records/run "
        "| run wall (s, median) | Spark job (s) | overhead (s) | missing | duplicated | failed runs |",
        "| ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        target = TARGET_P95_S.get(r["sink"])
        met = "" if target is None else (f"≤ {target:.0f} s: {'met' if r['p95'] <= target else 'missed'}")
        lines.append(f"| {r['rate']:,} | {r['sink']} | {r['records']:,} | {r['p50']:.1f} | {r['p95']:.1f} | "
                     f"{r['max']:.1f} | {met} | {r['runs_per_hour']:.0f} | {r['records_per_run']:,.0f} | "
                     f"{r.get('run_wall_s', 0):.1f} | {r.get('run_job_s', 0):.1f} | {r.get('run_overhead_s', 0):.1f} | "
                     f"{r['missing']} | {r['duplicates']} | {len(r['failed_runs'])} |")
    for rate in sorted({r["rate"] for r in rows}, reverse=True):
        lines.append(f"| {rate:,} | hourly schedule (computed) | | ≥ 1,800 | ≥ 3,420 | ≥ 3,600 | | 1 | {rate * 3600:,} "
                     f"| | | | | | |")
    lines += [
        "",
        "Where a run's seconds go (medians over each pipeline's successful runs, from Airflow's task records; "
        "overhead = run wall minus the Spark job, target ≤ 8 s; *between tasks* = run start to the plan task's "
        "start, each task's end to the next one's start, the commit's end to the run's end: the scheduler and the "
        "executor):",
        "",
        "| rate (records/s) | sink | runs | run wall (s) | plan (s) | Spark job (s) | commit (s) | between tasks (s) "
        "| overhead (s) | target ≤ 8 s |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        over = r.get("run_overhead_s", 0)
        lines.append(f"| {r['rate']:,} | {r['sink']} | {r.get('run_runs', 0)} | {r.get('run_wall_s', 0):.1f} | "
                     f"{r.get('run_plan_s', 0):.1f} | {r.get('run_job_s', 0):.1f} | {r.get('run_commit_s', 0):.1f} | "
                     f"{r.get('run_airflow_s', 0):.1f} | {over:.1f} | {'met' if over <= 8 else 'missed'} |")
    lines += [
        "",
        "Where a record's time goes (medians over runs): the oldest record of a run waited "
        + "; ".join(f"{r['wait_p50']:.1f} s before its run planned and {r['plan_to_visible_p50']:.1f} s from plan to "
                    f"visible ({r['sink']}, {r['rate']:,}/s)" for r in rows)
        + ". The hourly rows are not measured: a record arriving at a uniform moment of the hour waits for the next "
          "hour's run (p50 30 min, p95 57 min, max 60 min), then for that run, which at these rates reads "
          "720,000 or 7,200,000 records.",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetbatch_dev.bench.freshness", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the producer writes, per rate")
    parser.add_argument("--rates", default="2000,200", help="records per second, comma-separated")
    parser.add_argument("--sinks", default="files,iceberg", help="files, iceberg (one pipeline each, same topic)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--count-seconds", type=float, default=2.0,
                        help="the rule's min_records, in seconds of records at the rate")
    parser.add_argument("--max-delay", default="30s")
    parser.add_argument("--poll", default="2s")
    parser.add_argument("--allow-load", action="store_true")
    parser.add_argument("--docs", default=str(PROJECT_ROOT / "docs"))
    args = parser.parse_args(argv)
    console = Console()
    warning = quiet.check_start(console, args.allow_load)
    command = report.command_line("offsetbatch_dev.bench.freshness", argv)
    work = local_dir() / "bench-freshness"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    broker.start()
    pg = PostgresCluster()
    pg.start()
    connect = SparkConnectServer(port=CONNECT_PORT, master="local[2]", home=work / "spark-connect",
                                 conf={"spark.sql.shuffle.partitions": "2"})
    connect.start()
    try:
        home, dags = work / "airflow", work / "dags"
        dags.mkdir(parents=True)
        env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
               "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
               "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": pg.create_database("airflow_bench_fresh"),
               "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka",
                                                         "extra": {"bootstrap.servers": broker.bootstrap}}),
               f"AIRFLOW_CONN_{CONNECT_CONN.upper()}": json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1",
                                                                   "port": CONNECT_PORT}),
               "OFFSETBATCH_HOME": str(work)}
        env.pop("OFFSETBATCH_FAULTS", None)
        subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True)
        rows = []
        for rate in (int(x) for x in args.rates.split(",")):
            rows += measure_rate(rate, args, work, env, broker.bootstrap, console)
    finally:
        connect.stop()
        for ledger in _LEDGERS.values():
            ledger.dispose()
    table = Table(title="freshness under the lag trigger")
    for col in ("rate/s", "sink", "records", "p50 s", "p95 s", "max s", "runs/h", "records/run", "missing", "dup"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(f"{r['rate']:,}", r["sink"], f"{r['records']:,}", f"{r['p50']:.1f}", f"{r['p95']:.1f}",
                      f"{r['max']:.1f}", f"{r['runs_per_hour']:.0f}", f"{r['records_per_run']:,.0f}", str(r["missing"]),
                      str(r["duplicates"]))
    console.print(table)
    (work / "results.json").write_text(json.dumps(rows, indent=1))
    Path(args.docs).mkdir(parents=True, exist_ok=True)
    report.write_section(Path(args.docs) / "benchmarks.md", "freshness", section(rows, args, command, warning))
    console.print(f"written to {Path(args.docs) / 'benchmarks.md'} (raw: {work / 'results.json'})")
    lost = [r for r in rows if r["missing"] or r["duplicates"] or r["latency_records"] != r["records"]]
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
