"""``make bench`` (``python -m offsetbatch_dev.bench``): one run, one machine, the local broker.

1. produce the data set once (default 5,000,000 JSON records of ~200 B over 8 partitions);
2. per repetition, over the same ranges and Spark settings: raw read, batch job, the peers
   (Structured Streaming + Trigger.AvailableNow, a spark.read batch: ``peers/``, no project code),
   whole DAG run; medians and ratios;
3. planning and commit cost at 10 / 100 / 1,000 partitions on SQLite and PostgreSQL;
4. write docs/benchmarks.md and docs/benchmarks.png.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from offsetbatch.paths import local_dir

from offsetbatch_dev import PROJECT_ROOT
from offsetbatch_dev.bench import ledger_cost, report, throughput
from offsetbatch_dev.bench.dataset import ensure_dataset
from offsetbatch_dev.stack.kafka_broker import KafkaBroker
from offsetbatch_dev.stack.postgres import PostgresCluster
from offsetbatch_dev.stack.spark_connect import SparkConnectServer

CONNECT_CONN = "spark_connect_bench"


def _airflow_env(work: Path, bootstrap: str) -> dict:
    """A private Airflow home for the whole-DAG-run measurement (SQLite metadata, local connections)."""
    home, dags = work / "airflow", work / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
           "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}),
           "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]",
                                                     "extra": {"deploy-mode": "client"}})}
    env.pop("OFFSETBATCH_FAULTS", None)
    (home / "airflow.db").unlink(missing_ok=True)  # fresh metadata: the DAG's Asset is registered anew
    subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True)
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetbatch_dev.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--topic", default=None, help="default: bench-<records>-<partitions>")
    parser.add_argument("--partition-counts", default="10,100,1000")
    parser.add_argument("--driver-memory", default="1g", help="every measurement's spark.driver.memory (Spark's default, what the sample pipeline runs with)")
    parser.add_argument("--docs", default=str(PROJECT_ROOT / "docs"))
    args = parser.parse_args(argv)
    console = Console()
    started = time.monotonic()
    command = "make bench" if not argv else "python -m offsetbatch_dev.bench " + " ".join(argv)
    work = local_dir() / "bench"
    work.mkdir(parents=True, exist_ok=True)

    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    broker.start()
    ds = ensure_dataset(broker.bootstrap, args.topic or f"bench-{args.records}-{args.partitions}",
                        args.records, args.partitions)
    console.print(f"data set: {ds.records:,} records, {ds.bytes / 2**20:.0f} MiB, topic {ds.topic}")
    spec_uri = str(work / "spec.json")
    throughput.job_spec(ds, broker.bootstrap, str(work / "unused")).save(spec_uri)
    conf = throughput.spark_conf(args.driver_memory)
    connect = SparkConnectServer(home=work / "spark-connect", driver_memory=args.driver_memory,
                                 conf={k: v for k, v in conf.items() if k != "spark.driver.memory"})
    connect.start()
    env = {**_airflow_env(work, broker.bootstrap), f"AIRFLOW_CONN_{CONNECT_CONN.upper()}": json.dumps(
        {"conn_type": "spark_connect", "host": "127.0.0.1", "port": connect.port})}

    samples: dict[str, list[throughput.Sample]] = {k: [] for k in report.MEASURES}
    dag_stats: dict[str, list[dict]] = {}
    steps = [(rep, key) for rep in range(args.repeat) for key in report.MEASURES]
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("throughput", total=len(steps))
        for rep, key in steps:
            bar.update(task, description=f"throughput: run {rep + 1}/{args.repeat}, {report.MEASURES[key]}")
            if key == "raw":
                s = throughput.raw_read(spec_uri, conf, work, rep)
            elif key == "job":
                s = throughput.batch_job(ds, broker.bootstrap, conf, work, rep)
            elif key == "peer":
                s = throughput.peer("structured_streaming", ds, broker.bootstrap, conf, work, rep)
            elif key == "batch_peer":
                s = throughput.peer("batch_read", ds, broker.bootstrap, conf, work, rep)
            else:
                s, stats = throughput.whole_dag_run(ds, env, work, rep, args.driver_memory,
                                                    connect_conn_id=CONNECT_CONN if key == "dag_connect" else None)
                dag_stats.setdefault(key, []).append(stats)
            if s.records != ds.records:
                raise RuntimeError(f"{key} read {s.records} records, expected {ds.records}")
            samples[key].append(s)
            console.log(f"{report.MEASURES[key]}: {s.seconds:.1f}s in app, {s.wall:.1f}s wall, "
                        f"{ds.records / s.seconds:,.0f} records/s")
            bar.advance(task)

        connect.stop()
        pg = PostgresCluster()
        pg.start()
        counts = [int(x) for x in args.partition_counts.split(",")]
        cost_steps = [(n, b, r) for n in counts for b in ("sqlite", "postgresql") for r in range(args.repeat)]
        task = bar.add_task("plan/commit cost", total=len(cost_steps))
        costs = []
        for n, backend, rep in cost_steps:
            bar.update(task, description=f"plan/commit cost: {n} partitions, {backend}, run {rep + 1}")
            if backend == "sqlite":
                db = work / f"cost-{n}-{rep}.db"
                db.unlink(missing_ok=True)
                url = f"sqlite:///{db}"
            else:
                url = pg.create_database(f"bench_cost_{n}_{rep}")
            costs.append(ledger_cost.measure(broker.bootstrap, n, backend, url, work, "kafka_default"))
            bar.advance(task)

    docs = Path(args.docs)
    docs.mkdir(parents=True, exist_ok=True)
    report.chart(ds, samples, costs, docs / "benchmarks.png")
    minutes = (time.monotonic() - started) / 60
    doc = docs / "benchmarks.md"
    doc.write_text(report.with_sections_of(doc, report.markdown(ds, samples, costs, dag_stats, command, minutes,
                                                                "benchmarks.png")))
    t = Table(title="ratios (medians)", title_justify="left")
    for col in ("ratio", "value"):
        t.add_column(col)
    for k, v in report.ratios(samples).items():
        t.add_row(k, f"{v:.2f}")
    for key in ("dag", "dag_connect"):
        t.add_row(f"{report.MEASURES[key].split(' (')[0]}: tasks minus job (s)", f"{report.fixed_cost(dag_stats[key]):.1f}")
    console.print(t)
    console.print(f"wrote {docs / 'benchmarks.md'} and {docs / 'benchmarks.png'} in {minutes:.1f} min")
    shutil.rmtree(work / "dags", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
