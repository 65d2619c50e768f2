"""The Spark job of a small batch on a warm Spark Connect server (issue 42: a lag trigger makes
small batches the common case; the target is 3 s for 10,000 records).

    python -m offsetbatch_dev.bench.small_batch [--records 10000] [--repeat 5] [--profile]

Produces ``--records`` JSON sample events once (4 partitions), starts a Connect server
(``local[2]``), then runs the spark_job task's own call (``run_batches``) ``--repeat`` times on a
fresh table, each in a new session as the task does. Prints each run's seconds (the manifest's
``job_seconds`` and the wall time including the session) and, with ``--profile``, the client's
cProfile of the last run: where a run waits on the server (each Spark Connect RPC is a round trip).
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

from rich.console import Console

from offsetbatch.paths import local_dir
from offsetbatch.sinks.files import TableLayout

from offsetbatch_dev.bench import throughput
from offsetbatch_dev.bench.dataset import ensure_dataset
from offsetbatch_dev.stack.kafka_broker import KafkaBroker
from offsetbatch_dev.stack.spark_connect import SparkConnectServer

PORT = 15291


def one_run(url: str, spec_uri: str, attempt: str) -> tuple[float, float]:
    """(wall seconds including the session, the manifest's job seconds)."""
    from pyspark.sql import SparkSession

    from offsetbatch.job.run import SQL_DEFAULTS, run_batches
    from offsetbatch.jobspec import JobSpec

    t0 = time.monotonic()
    spark = SparkSession.builder.remote(url).create()
    try:
        for key, value in SQL_DEFAULTS.items():
            spark.conf.set(key, value)
        [manifest] = run_batches(spark, [JobSpec.load(spec_uri)], attempt, {})
    finally:
        spark.stop()
    return time.monotonic() - t0, manifest.job_seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetbatch_dev.bench.small_batch", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print the client's cProfile of the last run")
    args = parser.parse_args(argv)
    console = Console()
    work = local_dir() / "bench-small-batch"
    work.mkdir(parents=True, exist_ok=True)
    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    broker.start()
    ds = ensure_dataset(broker.bootstrap, f"bench-{args.records}-4", args.records, 4)
    server = SparkConnectServer(port=PORT, master="local[2]", home=work / "spark-connect",
                                conf={"spark.sql.shuffle.partitions": "2"})
    server.start()
    try:
        walls, jobs = [], []
        for rep in range(args.repeat):
            table = work / f"table-{rep}"
            shutil.rmtree(table, ignore_errors=True)
            spec = throughput.job_spec(ds, broker.bootstrap, str(table))
            uri = TableLayout(str(table)).spec(1)
            spec.save(uri)
            profiler = cProfile.Profile() if args.profile and rep == args.repeat - 1 else None
            if profiler:
                profiler.enable()
            wall, job = one_run(server.url, uri, f"rep{rep}")
            if profiler:
                profiler.disable()
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(45)
                console.print(out.getvalue())
            walls.append(wall)
            jobs.append(job)
            console.print(f"run {rep + 1}: {job:.2f} s job, {wall:.2f} s with the session ({args.records:,} records)")
        console.print(f"median of runs 2..{args.repeat}: job {statistics.median(jobs[1:] or jobs):.2f} s, "
                      f"with the session {statistics.median(walls[1:] or walls):.2f} s")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
