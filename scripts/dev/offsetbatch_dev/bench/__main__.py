"""``make bench`` (``python -m offsetbatch_dev.bench``): one run, one machine, the local broker.

1. produce the data sets once (default 1,000,000 and 5,000,000 JSON records of ~200 B over 8
   partitions; a topic that holds one already is reused);
2. ``throughput``: per repetition and size, interleaved, over the same ranges and Spark settings:
   the raw read, the batch job and the two peers (Structured Streaming + Trigger.AvailableNow, a
   spark.read batch: ``peers/``, no project code); medians, spreads, ratios per repetition;
3. ``dag``: whole DAG runs (spark-submit, Spark Connect) at the largest size;
4. ``cost``: planning and commit cost at 10 / 100 / 1,000 partitions on SQLite and PostgreSQL;
5. ``avro``: the same events as Confluent-framed Avro (``avro_dataset``; schemas from the stand-in
   registry, resolved as the plan task does), per repetition and size, interleaved: the raw read,
   the job, a Structured Streaming peer calling ``from_avro`` (``peers/``, no project code) and the
   floor: a ``spark.read`` batch that only decodes and writes, with the job's Spark settings;
5b. ``formats``: the job on the same 1,000,000 events as JSON, Confluent-framed Avro and Confluent-framed
   Protobuf, interleaved, with the time ratios per repetition (``formats``, a section of its own);
6. ``freshness``: per-record latency under the lag trigger at a steady 2,000 and 200 records/s,
   10 min each, files and Iceberg sinks, on the real scheduler, triggerer and Spark Connect
   (``freshness``, a section of its own);
7. ``growth``: one pipeline's ledger grown to 100,000 batches and its sinks to 2,880 minute batches, measured
   with a maintenance pass every 15 simulated minutes and after (issue 43; ``growth``, a section of its own);
8. ``fleet`` (opt-in: ``--phases fleet``, or ``make bench-fleet``; about 50 min): N = 10, 50, 100 pipelines
   under lag triggers on one Airflow and one Spark Connect server, 2,000 records/s over the fleet, 10 min
   per N (issue 53, item 3; ``fleet``, a section of its own); not in the default run;
9. write docs/benchmarks.md (one marked section per phase: a run of some phases keeps the others')
   and docs/benchmarks.png.

It refuses to start on a busy machine (``quiet``) unless ``--allow-load``, and flags any
measurement that something else competed with.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from offsetbatch.paths import local_dir

from offsetbatch_dev import PROJECT_ROOT
from offsetbatch_dev.bench import avro_dataset, ledger_cost, quiet, report, throughput
from offsetbatch_dev.bench.dataset import Dataset, ensure_dataset
from offsetbatch_dev.stack.kafka_broker import KafkaBroker
from offsetbatch_dev.stack.postgres import PostgresCluster
from offsetbatch_dev.stack.spark_connect import SparkConnectServer

PHASES = ("throughput", "dag", "cost", "avro", "formats", "freshness", "growth", "fleet")
DEFAULT_PHASES = tuple(p for p in PHASES if p != "fleet")  # the fleet's ~50 min are asked for by name
Samples = dict[int, dict[str, list[throughput.Sample]]]  # by size, by measurement: one per repetition
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


def _measure(key: str, ds: Dataset, bootstrap: str, spec_uri: str, conf: dict, work: Path, rep: int,
             value_schemas: dict | None = None) -> throughput.Sample:
    """One measurement; ``value_schemas``: ``ds`` is the Avro data set (the job decodes with them, the
    peer gets the reader schema as its argument)."""
    if key == "raw":
        return throughput.raw_read(spec_uri, conf, work, rep)
    if key in ("job", "job_no_text_checks"):
        app = throughput.JOB if key == "job" else throughput.JOB_WITHOUT_TEXT_CHECKS
        return throughput.batch_job(ds, bootstrap, conf, work, rep, name=f"{key}-avro" if value_schemas else key,
                                    value_schemas=value_schemas, app=app)
    if key == "avro_peer":
        assert value_schemas is not None
        return throughput.peer("structured_streaming_avro", ds, bootstrap, conf, work, rep,
                               schema=value_schemas["reader"])
    if key == "avro_floor":
        assert value_schemas is not None
        return throughput.peer("batch_read_avro", ds, bootstrap, throughput.floor_conf(conf), work, rep,
                               schema=value_schemas["reader"], required=[])
    if key == "json_floor":  # the least a Spark application does to land these records: parse, write
        return throughput.peer("batch_read", ds, bootstrap, throughput.floor_conf(conf), work, rep, required=[])
    if key == "peer_gc":  # the documented query with the job's driver collector
        return throughput.peer("structured_streaming", ds, bootstrap,
                               {**conf, "spark.driver.extraJavaOptions": "-XX:+UseParallelGC"}, work, rep)
    return throughput.peer("structured_streaming" if key == "peer" else "batch_read", ds, bootstrap, conf, work, rep)


def _interleaved(bar: Progress, console: Console, phase: str, datasets: dict[int, Dataset], keys: tuple[str, ...],
                 repeat: int, measure: Callable[[str, int, int], throughput.Sample]) -> Samples:
    """``measure(key, size, rep)`` for every repetition, size and key in that order (so that drift of
    the machine spreads over all of them), each checked to have read the whole data set and
    rejected nothing, flagged if the machine was busy just before."""
    samples: Samples = {n: {k: [] for k in keys} for n in datasets}
    steps = [(rep, n, key) for rep in range(repeat) for n in datasets for key in keys]
    task = bar.add_task(phase, total=len(steps))
    for rep, n, key in steps:
        what = f"run {rep + 1}/{repeat}, {n:,} records, {report.MEASURES[key]}"
        bar.update(task, description=f"{phase}: {what}")
        busy = quiet.busy_before_run(console, what)
        s = measure(key, n, rep)
        s.busy = busy
        if s.records != n or s.rejected:
            raise RuntimeError(f"{phase}: {key} read {s.records} records and rejected {s.rejected}, expected {n} and 0")
        samples[n][key].append(s)
        console.log(f"{what}: {s.seconds:.1f}s in app, {s.wall:.1f}s wall, {n / s.seconds:,.0f} records/s")
        bar.advance(task)
    return samples


def _ratio_console(title: str, samples: Samples, compared: dict[str, tuple[str, float | None]]) -> Table:
    t = Table(title=title, title_justify="left")
    for col in ("records", "ratio", "value", "per repetition"):
        t.add_column(col)
    for n in sorted(samples):
        for key, v in report.ratios(samples[n], compared).items():
            t.add_row(f"{n:,}", f"job / {compared[key][0]}", f"{v:.2f}",
                      ", ".join(f"{x:.2f}" for x in report.ratio_runs(samples[n], key)))
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetbatch_dev.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,5000000", help="records per data set, comma-separated")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5, help="repetitions of each throughput measurement")
    parser.add_argument("--dag-repeat", type=int, default=3, help="repetitions of each whole DAG run and plan/commit cost")
    parser.add_argument("--phases", default=",".join(DEFAULT_PHASES),
                        help=f"which of {', '.join(PHASES)} to run (default all but fleet)")
    parser.add_argument("--partition-counts", default="10,100,1000")
    parser.add_argument("--driver-memory", default="1g", help="every measurement's spark.driver.memory (Spark's default, what the sample pipeline runs with)")
    parser.add_argument("--avro-measures", default=",".join(report.AVRO),
                        help="the avro phase's measurements (default all; a subset writes a section of its own)")
    parser.add_argument("--allow-load", action="store_true", help="measure even if the machine is busy (the report says so)")
    parser.add_argument("--docs", default=str(PROJECT_ROOT / "docs"))
    args = parser.parse_args(argv)
    phases = [p for p in PHASES if p in args.phases.split(",")]
    console = Console()
    warning = quiet.check_start(console, args.allow_load)
    started = time.monotonic()
    given = sys.argv[1:] if argv is None else argv
    command = "make bench" if not given else "python -m offsetbatch_dev.bench " + " ".join(given)
    work = local_dir() / "bench"
    work.mkdir(parents=True, exist_ok=True)

    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    broker.start()
    datasets = {n: ensure_dataset(broker.bootstrap, f"bench-{n}-{args.partitions}", n, args.partitions)
                for n in sorted(int(x) for x in args.sizes.split(","))}
    for ds in datasets.values():
        console.print(f"data set: {ds.records:,} records, {ds.bytes / 2**20:.0f} MiB, topic {ds.topic}")
    if "avro" in phases:
        # The registry serves only while the Avro data sets are made and their schemas resolved (what
        # the plan task does); it is gone before any Spark application runs.
        with avro_dataset.registry() as registry:
            made = {n: avro_dataset.ensure_avro_dataset(broker.bootstrap, registry, n, args.partitions) for n in datasets}
            avro = {n: ds for n, (ds, _) in made.items()}
            schemas = {n: avro_dataset.value_schemas(ds, registry, throughput.REQUIRED, work) for n, ds in avro.items()}
        for n, ds in avro.items():
            console.print(f"Avro data set: {ds.records:,} records, {ds.bytes / 2**20:.0f} MiB, topic {ds.topic}, "
                          f"schema id {made[n][1]}")
    largest = datasets[max(datasets)]
    conf = throughput.spark_conf(args.driver_memory)
    sections: dict[str, list[str]] = {}
    samples: Samples = {}
    avro_samples: Samples = {}
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console) as bar:
        if "throughput" in phases:
            specs = {}
            for n, ds in datasets.items():
                specs[n] = str(work / f"spec-{n}.json")
                throughput.job_spec(ds, broker.bootstrap, str(work / "unused")).save(specs[n])
            samples = _interleaved(bar, console, "throughput", datasets, report.THROUGHPUT, args.repeat,
                                   lambda key, n, rep: _measure(key, datasets[n], broker.bootstrap, specs[n], conf, work, rep))
            sections["bench-throughput"] = report.throughput_section(datasets, samples, command, warning)

        if "dag" in phases:
            connect = SparkConnectServer(home=work / "spark-connect", driver_memory=args.driver_memory,
                                         conf={k: v for k, v in conf.items() if k != "spark.driver.memory"})
            connect.start()
            env = {**_airflow_env(work, broker.bootstrap), f"AIRFLOW_CONN_{CONNECT_CONN.upper()}": json.dumps(
                {"conn_type": "spark_connect", "host": "127.0.0.1", "port": connect.port})}
            dag_samples: dict[str, list[throughput.Sample]] = {"dag": [], "dag_connect": []}
            dag_stats: dict[str, list[dict]] = {"dag": [], "dag_connect": []}
            steps = [(rep, key) for rep in range(args.dag_repeat) for key in dag_samples]
            task = bar.add_task("whole DAG runs", total=len(steps))
            for rep, key in steps:
                bar.update(task, description=f"whole DAG runs: run {rep + 1}/{args.dag_repeat}, {report.MEASURES[key]}")
                s, stats = throughput.whole_dag_run(largest, env, work, rep, args.driver_memory,
                                                    connect_conn_id=CONNECT_CONN if key == "dag_connect" else None)
                if s.records != largest.records:
                    raise RuntimeError(f"{key} read {s.records} records, expected {largest.records}")
                dag_samples[key].append(s)
                dag_stats[key].append(stats)
                console.log(f"{report.MEASURES[key]}: {s.wall:.1f}s wall")
                bar.advance(task)
            connect.stop()
            shutil.rmtree(work / "dags", ignore_errors=True)
            sections["bench-dag"] = report.dag_section(largest, dag_samples, dag_stats, command)

        if "cost" in phases:
            pg = PostgresCluster()
            pg.start()
            counts = [int(x) for x in args.partition_counts.split(",")]
            cost_steps = [(n, b, r) for n in counts for b in ("sqlite", "postgresql") for r in range(args.dag_repeat)]
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
            sections["bench-cost"] = report.cost_section(costs, command)

        if "avro" in phases:
            avro_specs = {}
            for n, ds in avro.items():
                avro_specs[n] = str(work / f"spec-avro-{n}.json")
                throughput.job_spec(ds, broker.bootstrap, str(work / "unused"), schemas[n]).save(avro_specs[n])
            keys = tuple(k for k in report.AVRO if k in args.avro_measures.split(",") or k == "job")
            avro_samples = _interleaved(
                bar, console, "avro", avro, keys, args.repeat,
                lambda key, n, rep: _measure(key, avro[n], broker.bootstrap, avro_specs[n], conf, work, rep, schemas[n]))
            name = "bench-avro" if keys == report.AVRO else "bench-avro-" + "-".join(k for k in keys if k != "job")
            sections[name] = report.avro_section(avro, avro_samples, made[max(made)][1], command, warning, keys)

    docs = Path(args.docs)
    docs.mkdir(parents=True, exist_ok=True)
    if "formats" in phases:  # its own data sets (the JSON one shared); it writes its own section
        from offsetbatch_dev.bench import formats

        formats.main(["--docs", str(docs), "--allow-load", "--partitions", str(args.partitions),
                      "--repeat", str(min(args.repeat, 3)), "--driver-memory", args.driver_memory])
    if "freshness" in phases:  # its own services and producer; it writes its own section
        from offsetbatch_dev.bench import freshness

        # The machine was checked when this run started; the load the earlier phases leave in the
        # load average is this run's own, and the section reports it.
        freshness.main(["--docs", str(docs), "--allow-load"])
    if "growth" in phases:  # its own ledgers, tables and api-server; it writes its own section
        from offsetbatch_dev.bench import growth

        growth.main(["--docs", str(docs), "--allow-load"])
    if "fleet" in phases:  # its own services, topics and producer; it writes its own section
        from offsetbatch_dev.bench import fleet

        fleet.main(["--docs", str(docs), "--allow-load"])
    png = None
    if "throughput" in phases:
        report.chart(datasets, samples, docs / "benchmarks.png")
        png = "benchmarks.png"
    elif (docs / "benchmarks.png").exists():
        png = "benchmarks.png"
    minutes = (time.monotonic() - started) / 60
    doc = docs / "benchmarks.md"
    doc.write_text(report.with_sections_of(doc, report.document(sections, datasets, minutes, png)))
    if "throughput" in phases:
        console.print(_ratio_console("job throughput ratios (medians; > 1: the job is faster)", samples, report.COMPARED))
    if "avro" in phases:
        taken = next(iter(avro_samples.values()))
        console.print(_ratio_console("job throughput ratios on Avro (medians; > 1: the job is faster)", avro_samples,
                                     {k: v for k, v in report.AVRO_COMPARED.items() if k in taken}))
    console.print(f"wrote {doc}{' and ' + str(docs / png) if png else ''} in {minutes:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
