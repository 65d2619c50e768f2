"""The Spark job of a small batch on a warm Spark Connect server (issue 42: a lag trigger makes
small batches the common case; the target is 3 s for 10,000 records).

    python -m offsetbatch_dev.bench.small_batch [--records 10000] [--repeat 5] [--profile]

Produces ``--records`` JSON sample events once (4 partitions), starts a Connect server
(``local[2]``), then runs the spark_job task's own call (``run_batches``) ``--repeat`` times on a
fresh table, each in a new session as the task does, and after each the baselines, in new sessions
too: the job's own Kafka read of the same ranges, only counted (``raw_read_app.raw``), and the
no-check floor (``floor_run``: that read parsed and written, nothing checked). Prints
each run's seconds (the manifest's ``job_seconds``, the wall time including the session, the raw
read), the Spark Connect round trips each made (``connect_calls``: AnalyzePlan, ExecutePlan, Config)
and, with ``--profile``, the client's cProfile of the last run: where a run waits on the
server (each Spark Connect RPC is a round trip). Refuses a busy machine unless ``--allow-load``
(``quiet``); the medians go to docs/benchmarks.md, section ``small-batch``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import statistics
import time
from pathlib import Path

from rich.console import Console

from offsetbatch.paths import local_dir
from offsetbatch.sinks.files import TableLayout

from offsetbatch_dev import PROJECT_ROOT
from offsetbatch_dev.bench import quiet, report, throughput
from offsetbatch_dev.bench.connect_calls import Call, counting, summary
from offsetbatch_dev.bench.dataset import ensure_dataset
from offsetbatch_dev.stack.kafka_broker import KafkaBroker
from offsetbatch_dev.stack.spark_connect import SparkConnectServer

PORT = 15291
TARGET_S = 3.0  # issue 42: the Spark job of a 10,000-record batch on Spark Connect


def one_run(url: str, spec_uri: str, attempt: str) -> tuple[float, float, list[Call]]:
    """(wall seconds including the session, the manifest's job seconds, the job's round trips)."""
    from pyspark.sql import SparkSession

    from offsetbatch.job.run import SQL_DEFAULTS, run_batches
    from offsetbatch.jobspec import JobSpec

    t0 = time.monotonic()
    spark = SparkSession.builder.remote(url).create()
    try:
        for key, value in SQL_DEFAULTS.items():
            spark.conf.set(key, value)
        with counting() as calls:
            [manifest] = run_batches(spark, [JobSpec.load(spec_uri)], attempt, {})
    finally:
        spark.stop()
    return time.monotonic() - t0, manifest.job_seconds, calls


def raw_run(url: str, spec_uri: str) -> tuple[float, list[Call]]:
    """The baseline: the job's own read of the same ranges, only counted, in a new session."""
    from pyspark.sql import SparkSession

    from offsetbatch.jobspec import JobSpec

    from offsetbatch_dev.bench.raw_read_app import raw

    spark = SparkSession.builder.remote(url).create()
    try:
        with counting() as calls:
            seconds = raw(spark, JobSpec.load(spec_uri))["seconds"]
        return seconds, calls
    finally:
        spark.stop()


def floor_run(url: str, spec_uri: str, out: Path) -> float:
    """The no-check floor of a small batch: the job's own read of the same ranges, one ``from_json``
    and the same kind of partitioned Parquet write (by the event's date), in a new session with the
    job's session settings (``SQL_DEFAULTS``, ``job.codegen``); nothing checked, counted or
    recorded. The job's ratio to it is what its checks and bookkeeping cost a small batch."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from offsetbatch.job import codegen
    from offsetbatch.job.read import read_ranges
    from offsetbatch.job.run import SQL_DEFAULTS
    from offsetbatch.jobspec import JobSpec

    spec = JobSpec.load(spec_uri)
    spark = SparkSession.builder.remote(url).create()
    try:
        for key, value in SQL_DEFAULTS.items():
            spark.conf.set(key, value)
        started = time.monotonic()
        with codegen.for_batch(spark, sum(r.size for r in spec.offset_ranges)):
            parsed = read_ranges(spark, spec).select(
                F.from_json(F.col("value").cast("string"), throughput.SCHEMA).alias("v"),
                F.col("partition").alias("kafka_partition"), F.col("offset").alias("kafka_offset"))
            (parsed.select("v.*", "kafka_partition", "kafka_offset")
             .withColumn("event_date", F.to_date("event_time"))
             .write.partitionBy("event_date").parquet(str(out)))
        return time.monotonic() - started
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetbatch_dev.bench.small_batch", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print the client's cProfile of the last run")
    parser.add_argument("--allow-load", action="store_true", help="measure on a busy machine (the report says so)")
    parser.add_argument("--docs", default=str(PROJECT_ROOT / "docs"), help="where benchmarks.md is (its section small-batch)")
    args = parser.parse_args(argv)
    console = Console()
    warning = quiet.check_start(console, args.allow_load)
    work = local_dir() / "bench-small-batch"
    work.mkdir(parents=True, exist_ok=True)
    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    broker.start()
    ds = ensure_dataset(broker.bootstrap, f"bench-{args.records}-4", args.records, 4)
    server = SparkConnectServer(port=PORT, master="local[2]", home=work / "spark-connect",
                                conf={"spark.sql.shuffle.partitions": "2"})
    server.start()
    try:
        walls, jobs, raws, floors, busy = [], [], [], [], []
        for rep in range(args.repeat):
            table = work / f"table-{rep}"
            shutil.rmtree(table, ignore_errors=True)
            spec = throughput.job_spec(ds, broker.bootstrap, str(table))
            uri = TableLayout(str(table)).spec(1)
            spec.save(uri)
            busy.append(quiet.busy_before_run(console, f"run {rep + 1}"))
            profiler = cProfile.Profile() if args.profile and rep == args.repeat - 1 else None
            if profiler:
                profiler.enable()
            wall, job, job_calls = one_run(server.url, uri, f"rep{rep}")
            if profiler:
                profiler.disable()
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(45)
                console.print(out.getvalue())
            walls.append(wall)
            jobs.append(job)
            raw_seconds, raw_calls = raw_run(server.url, uri)
            raws.append(raw_seconds)
            floor_out = work / f"floor-{rep}"
            shutil.rmtree(floor_out, ignore_errors=True)
            floors.append(floor_run(server.url, uri, floor_out))
            shutil.rmtree(floor_out, ignore_errors=True)
            console.print(f"run {rep + 1}: {job:.2f} s job, {wall:.2f} s with the session, raw read {raws[-1]:.2f} s, "
                          f"no-check floor {floors[-1]:.2f} s ({args.records:,} records)\n  job: {summary(job_calls)}\n  raw read: {summary(raw_calls)}")
    finally:
        server.stop()
    lines = section(args.records, jobs, walls, raws, floors, busy, report.command_line("offsetbatch_dev.bench.small_batch", argv),
                    warning, (summary(job_calls), summary(raw_calls)))
    console.print("\n".join(lines[2:]))
    report.write_section(Path(args.docs) / "benchmarks.md", "small-batch", lines)
    return 0


def section(records: int, jobs: list[float], walls: list[float], raws: list[float], floors: list[float],
            busy: list[float], command: str, warning: str | None,
            round_trips: tuple[str, str] | None = None) -> list[str]:
    """The docs section: medians of the warm runs (the first run warms the server's JVM)."""
    warm = slice(1, None) if len(jobs) > 1 else slice(None)
    job, wall, raw, floor = (statistics.median(xs[warm]) for xs in (jobs, walls, raws, floors))
    per_run = ", ".join(f"{f / j:.2f}" for j, f in zip(jobs[warm], floors[warm]))
    flagged = [i + 1 for i, b in enumerate(busy) if b > quiet.BUSY_LIMIT]
    return [
        "## The Spark job of a small batch on Spark Connect (issue 42)",
        "",
        f"`{command}`, {time.strftime('%Y-%m-%d')}. {report.machine()}. {records:,} JSON sample events in 4 "
        f"partitions; one Spark Connect server (`local[2]`), warm after the first run. Each run is the spark_job "
        f"task's own call (`run_batches`: parse, checks, statistics, partitioned Parquet write, manifest) in a new "
        f"session, on a new table; after it, the baselines, each in a new session: the job's own Kafka read of "
        f"the same ranges, only counted, and the no-check floor (`floor_run`: that read, one `from_json`, a "
        f"Parquet write partitioned by the event's date, with the job's session settings; nothing checked).",
        "",
        f"**Measured on a busy machine:** {warning}." if warning else "The machine was quiet at the start "
        f"(`quiet.check_start`).",
        "",
        "| measure | median of runs 2..N (s) | runs (s) |",
        "| --- | ---: | --- |",
        f"| the job (`job_seconds`) | **{job:.2f}** | {', '.join(f'{x:.2f}' for x in jobs)} |",
        f"| the job with its session | {wall:.2f} | {', '.join(f'{x:.2f}' for x in walls)} |",
        f"| raw read, count only (baseline) | {raw:.2f} | {', '.join(f'{x:.2f}' for x in raws)} |",
        f"| no-check floor: parse and write only (baseline) | {floor:.2f} | {', '.join(f'{x:.2f}' for x in floors)} |",
        "",
        f"Job / raw read: {job / raw:.2f}x. Job / no-check floor: {job / floor:.2f}x (floor / job per warm run: "
        f"{per_run}). Target: the job at most {TARGET_S:g} s for 10,000 records: "
        f"{'met' if job <= TARGET_S else 'missed'} ({job:.2f} s)."
        + (f" Runs {', '.join(map(str, flagged))} started on a busy machine (over {quiet.BUSY_LIMIT:.0f} % CPU)."
           if flagged else ""),
        *([] if round_trips is None else [
            "", f"Spark Connect round trips of the last run (`connect_calls`): the job {round_trips[0]}; the raw "
                f"read {round_trips[1]}."]),
    ]


if __name__ == "__main__":
    raise SystemExit(main())
