"""Throughput over the same offset ranges and Spark settings: the raw read, the batch job, the whole
DAG run and the peers (Structured Streaming, a spark.read batch, Structured Streaming on Avro;
``peers/``). Each Spark measurement is one ``spark-submit``, timed from outside (wall) and from
inside (after the Spark session is up); the peak RSS of the driver JVM is sampled every 100 ms."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psutil

from offsetbatch.dag.driver_jvm import spark_defaults, with_driver_gc
from offsetbatch.dag.spark_jars import spark_connector_jars
from offsetbatch.jobspec import JobSpec, Manifest
from offsetbatch_dev import PROJECT_ROOT
from offsetbatch.sinks.files import TableLayout
from offsetbatch import job_secrets
from offsetbatch.source.connection import KafkaClientConfig
from offsetbatch_dev.bench.dataset import Dataset

SCHEMA = "event_id STRING, kind STRING, user_id INT, page STRING, event_time TIMESTAMP, amount DOUBLE, session STRING"
REQUIRED = ["event_id", "kind", "event_time"]
OUTPUT_COLUMNS = ["event_id", "kind", "user_id", "page", "event_time", "amount", "kafka_partition", "kafka_offset"]
TRANSFORM = f"SELECT {', '.join(OUTPUT_COLUMNS)} FROM records"
JOB = PROJECT_ROOT / "jobs" / "offsetbatch_job.py"  # the runtime's spark-submit entry, as the spark_job task submits it
HERE = Path(__file__).resolve().parent
JOB_WITHOUT_TEXT_CHECKS = HERE / "job_without_text_checks.py"  # the job minus its Avro UTF-8 checks
RAW_READ_APP = HERE / "raw_read_app.py"  # the benchmark's own application (the raw read), beside this file
PEERS = HERE / "peers"  # what a user writes instead; they import nothing of the project


@dataclass
class Sample:
    """One measurement: seconds inside the application (Spark up) and wall seconds, peak driver RSS."""

    seconds: float
    wall: float
    peak_rss_mb: float | None
    records: int
    busy: float = 0.0  # % CPU the machine used just before the run, the benchmark idle (``quiet``)
    rejected: int = 0  # the job's rejected records: none in a benchmark data set, or the job did not parse


def spark_conf(driver_memory: str) -> dict[str, str]:
    """The Spark settings every measurement (and the benchmark pipeline's DAG run) uses."""
    return {"spark.driver.memory": driver_memory, "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "8",
            "spark.driver.bindAddress": "127.0.0.1"}


def job_spec(ds: Dataset, bootstrap: str, table: str, value_schemas: dict | None = None,
             value_format: str = "confluent-avro") -> JobSpec:
    """The spec the plan task writes for ``ds``; ``value_schemas``: the values are Confluent
    prefix-framed Avro (``value_format`` "confluent-protobuf": Protobuf), decoded with these schemas
    (``avro_dataset.value_schemas``, ``protobuf_dataset.value_schemas``), else JSON."""
    value = (dict(value_format="json", schema_ddl=SCHEMA) if value_schemas is None else
             dict(value_format=value_format, schema_ddl=None, value_schemas=value_schemas, schema_id="prefix"))
    return JobSpec(pipeline="bench", batch_id=1, output_id=1, bootstrap=bootstrap,
                   ranges=[{"topic": tp.topic, "partition": tp.partition, "from_offset": a, "until_offset": b,
                            "frontier_before": a} for tp, (a, b) in sorted(ds.ranges.items())],
                   sink={"type": "files", "path": table, "event_time_column": "event_time"},
                   required=REQUIRED, **value,
                   transform_sql=TRANSFORM, transform_python=None,
                   isolation_level="read_uncommitted", records_per_task=2_000_000)


def _watch_rss(proc: subprocess.Popen, peak: list[float], stop: threading.Event) -> None:
    try:
        root = psutil.Process(proc.pid)
    except psutil.NoSuchProcess:
        return
    while not stop.is_set():
        try:
            for p in [root, *root.children(recursive=True)]:
                if p.name() == "java":
                    peak[0] = max(peak[0], p.memory_info().rss / 2**20)
        except psutil.Error:
            pass
        stop.wait(0.1)


def spark_submit(app: Path, args: list[str], conf: dict[str, str], log: Path,
                 with_project: bool = True, master: str = "local[*]",
                 pythonpath: str | None = None) -> tuple[float, float, str]:
    """(wall seconds, peak driver RSS in MiB, output) of one spark-submit (``master``: local[*] or a
    standalone master's URL) with the connector; ``with_project``: the caller's environment as is
    (the project's applications import ``offsetbatch`` from this venv, as the spark_job task's do);
    False for the peers, which get no PYTHONPATH; ``pythonpath``: put first on it (another checkout's
    ``include/``, to measure that version of the job)."""
    cmd = [shutil.which("spark-submit") or "spark-submit", "--master", master,
           "--jars", ",".join(spark_connector_jars())]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    cmd += [str(app), *args]
    env = dict(os.environ)
    if not with_project:  # the peers: pyspark alone, nothing the caller put on PYTHONPATH
        env.pop("PYTHONPATH", None)
    elif pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    peak, stop = [0.0], threading.Event()
    t0 = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=out, text=True, env=env)
        watcher = threading.Thread(target=_watch_rss, args=(proc, peak, stop), daemon=True)
        watcher.start()
        stdout, _ = proc.communicate()
    wall = time.monotonic() - t0
    stop.set()
    if proc.returncode != 0:
        raise RuntimeError(f"{app.name} {' '.join(args)} failed with exit {proc.returncode}; see {log}")
    return wall, peak[0] or None, stdout


def _bench_line(stdout: str) -> dict:
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("BENCH "))[6:])


def product_conf(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` as the spark_job task submits it: with the driver JVM option it ships
    (``offsetbatch.dag.driver_jvm``). The job and the raw read (the job's own read) get it; the
    peers, which import nothing of the project, run with Spark's defaults."""
    return with_driver_gc(conf, spark_defaults())


def raw_read(spec_uri: str, conf: dict, work: Path, rep: int) -> Sample:
    wall, rss, out = spark_submit(RAW_READ_APP, ["raw", "--spec", spec_uri], product_conf(conf), work / f"raw-{rep}.log")
    r = _bench_line(out)
    return Sample(r["seconds"], wall, rss, r["records"])


def batch_job(ds: Dataset, bootstrap: str, conf: dict, work: Path, rep: int,
              client: KafkaClientConfig | None = None, name: str = "job", master: str = "local[*]",
              value_schemas: dict | None = None, app: Path = JOB, value_format: str = "confluent-avro") -> Sample:
    """The job as the spark_job task submits it; ``client``: a secured broker's settings (options
    in the spec, secrets in a private file, as the operator does); ``master``: where it runs;
    ``value_schemas``: Avro (or ``value_format``) values (``job_spec``); ``app``: the job's entry
    (a benchmark variant of it)."""
    table = work / f"{name}-{rep}" / "table"
    shutil.rmtree(table.parent, ignore_errors=True)
    spec = job_spec(ds, bootstrap, str(table), value_schemas, value_format)
    secrets_file = None
    if client is not None:
        spec.kafka_options = client.spark_options()
        secrets_file = job_secrets.write(client.spark_secrets())
    uri = TableLayout(str(table)).spec(1)
    spec.save(uri)
    try:
        wall, rss, _ = spark_submit(app, ["--spec", uri, "--attempt", "bench",
                                          *([job_secrets.ARG, str(secrets_file)] if secrets_file else [])],
                                    product_conf(conf), work / f"{name}-{rep}.log", master=master)
    finally:
        job_secrets.remove(secrets_file)
    m = Manifest.load(TableLayout(str(table)).staging_manifest(1, "bench"))
    shutil.rmtree(table.parent, ignore_errors=True)
    return Sample(m.job_seconds, wall, rss, m.rows_in, rejected=m.rows_rejected)


def floor_conf(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with every Spark setting the job ships (``product_conf``, the job's SQL defaults,
    the V2 Kafka reader, microsecond Parquet timestamps): for the Avro floor (``peers/batch_read_avro``),
    so that it differs from the job only in what the job checks and counts."""
    from offsetbatch.job.read import V1_SOURCES, V1_SOURCES_DEFAULT
    from offsetbatch.job.run import SQL_DEFAULTS

    v1 = ",".join(n for n in V1_SOURCES_DEFAULT.split(",") if n != "kafka")
    return {**product_conf(conf), **SQL_DEFAULTS, V1_SOURCES: v1,
            "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}


def peer(kind: str, ds: Dataset, bootstrap: str, conf: dict, work: Path, rep: int, schema: str = SCHEMA,
         required: list[str] = REQUIRED) -> Sample:
    """One of the peers (``structured_streaming``, ``batch_read``, ``structured_streaming_avro``,
    ``batch_read_avro``): what a user writes instead, over the same ranges, parse and output columns,
    submitted by path without the project's code; ``schema``: the value's (Spark DDL, or the Avro
    peers' Avro JSON); ``required``: the fields whose null drops a row."""
    out, ckpt = work / f"{kind}-{rep}" / "table", work / f"{kind}-{rep}" / "checkpoint"
    shutil.rmtree(out.parent, ignore_errors=True)
    starting = {ds.topic: {str(tp.partition): a for tp, (a, _) in ds.ranges.items()}}
    ending = {ds.topic: {str(tp.partition): b for tp, (_, b) in ds.ranges.items()}}
    args = ["--bootstrap", bootstrap, "--topic", ds.topic, "--starting", json.dumps(starting),
            "--ending", json.dumps(ending), "--schema", schema, "--required", ",".join(required),
            "--columns", ",".join(OUTPUT_COLUMNS), "--date-of", "event_time", "--out", str(out),
            "--checkpoint", str(ckpt)]
    wall, rss, stdout = spark_submit(PEERS / f"{kind}.py", args, conf, work / f"{kind}-{rep}.log", with_project=False)
    r = _bench_line(stdout)
    shutil.rmtree(out.parent, ignore_errors=True)
    return Sample(r["seconds"], wall, rss, r["records"])


TASK_START = re.compile(r"^(\S+) .*\[DAG TEST\] starting task_id=(\w+)")
TASK_RUNNING = re.compile(r"^(\S+) .*Task started ")
TASK_END = re.compile(r"^(\S+) .*\[DAG TEST\] end task task_id=(\w+)")


def task_seconds(log: str) -> dict[str, float]:
    """Per task of an ``airflow dags test`` log, from the task's start in the execution API to its
    end: what a run pays per task, without the CLI's own start-up and the in-process execution
    API's warm-up before the first task (a long-running API server has neither)."""
    out: dict[str, float] = {}
    current, started = None, None
    for line in log.splitlines():
        if m := TASK_START.match(line):
            current, started = m.group(2), None
        elif (m := TASK_RUNNING.match(line)) and current and started is None:
            started = datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
        elif (m := TASK_END.match(line)) and started is not None:
            out[m.group(2)] = (datetime.fromisoformat(m.group(1).replace("Z", "+00:00")) - started).total_seconds()
            current, started = None, None
    return out


def whole_dag_run(ds: Dataset, env: dict, work: Path, rep: int, driver_memory: str,
                  sink: dict | None = None, connect_conn_id: str | None = None) -> tuple[Sample, dict]:
    """``airflow dags test`` of the benchmark pipeline (plan + spark-submit + commit) on a fresh
    ledger and table; returns the sample and the batch's ledger stats plus ``task_seconds``.
    ``sink``: settings other than the files sink's (its ``path``, unless given, is the run's table:
    the DAG's Asset URI, the same every run); ``connect_conn_id``: run the job on that Spark Connect server instead."""
    import yaml

    from offsetbatch.ledger import Ledger

    root = work / "dag"  # one sink path: it is the DAG's Asset URI, which must not change between runs
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    cfg = {"name": "bench", "kafka": {"conn_id": "kafka_default", "topics": [ds.topic]}, "starting_policy": "earliest",
           "value": {"format": "json", "schema": SCHEMA, "required": REQUIRED},
           "transform": {"sql": TRANSFORM}, "sink": {"path": str(root / "table"), **(sink or {"event_time_column": "event_time"})},
           "ledger": {"url": f"sqlite:///{root}/ledger.db"},
           "spark": {"conf": spark_conf(driver_memory), **({"connect_conn_id": connect_conn_id} if connect_conn_id
                                                             else {"runner": "spark-submit"})},
           "airflow": {"retries": 0}}
    config = Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / "bench.yaml"
    config.write_text(yaml.safe_dump(cfg))
    (config.parent / "bench_dag.py").write_text(
        "# Airflow DAG (benchmark)\nfrom offsetbatch.dag.factory import pipeline_dag\n\n"
        f"dag = pipeline_dag({str(config)!r})\n")
    t0 = time.monotonic()
    proc = subprocess.run(["airflow", "dags", "test", "offsetbatch_bench"], env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    log = work / f"dag{'-connect' if connect_conn_id else ''}-{rep}.log"
    log.write_text(proc.stdout + proc.stderr)
    ledger = Ledger(cfg["ledger"]["url"])
    try:
        batches = ledger.list_batches("bench")
    finally:
        ledger.dispose()
    if proc.returncode != 0 or not batches or batches[0].status != "committed":
        raise RuntimeError(f"the benchmark DAG run failed; see {log}")
    stats = {**batches[0].stats, "task_seconds": task_seconds(proc.stdout + proc.stderr)}
    shutil.rmtree(root, ignore_errors=True)
    return Sample(wall, wall, None, stats["rows_in"]), stats
