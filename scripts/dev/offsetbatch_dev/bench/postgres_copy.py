"""The postgres sink's commit on a large batch: rows/s of the COPY and peak RSS of the commit.

    python -m offsetbatch_dev.bench.postgres_copy [--rows 1000000] [--url postgresql+psycopg2://...]

Stages ``--rows`` sample-event rows as Parquet (pyarrow, Spark-like row groups) where the Spark job
would leave them, then runs exactly the commit's in-transaction load
(``PostgresSink.publish_in_transaction`` inside ``Ledger.lock``) in a child process and reports
its wall time, rows/s and peak RSS (``ru_maxrss`` of that child: the commit task's memory; the
issue's bound is 500 MiB). Without ``--url`` it starts the local stack's PostgreSQL
(``offsetbatch-stack``). Runnable alone; not part of ``make bench`` (which would add the whole-run
comparison against the files sink on the same batch).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

CHILD = """
import json, sys, time
from offsetbatch.ledger import Ledger
from offsetbatch.sinks.postgres import PostgresSettings, PostgresSink
url, staging, table = sys.argv[1:4]
with Ledger(url, create=True) as ledger:
    sink = PostgresSink("bench_copy", PostgresSettings(path=staging, table=table, url=url))
    t0 = time.monotonic()
    with ledger.lock("bench_copy") as conn:
        sink.publish_in_transaction(conn, 1, 1, "a", ledger.identity)
    print(json.dumps({"seconds": time.monotonic() - t0}))
"""


def stage(root: Path, rows: int, chunk: int = 250_000) -> None:
    """``rows`` sample events as Parquet files plus a manifest, in attempt 'a' of batch 1."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from offsetbatch.jobspec import Manifest
    from offsetbatch.sinks.staging import StagingLayout

    layout = StagingLayout(str(root))
    data = Path(layout.staging_data(1, "a"))
    data.mkdir(parents=True, exist_ok=True)
    files = []
    for i, start in enumerate(range(0, rows, chunk)):
        n = min(chunk, rows - start)
        offsets = pa.array(range(start, start + n), pa.int64())
        table = pa.table({
            "event_id": pa.array([f"e{j:09d}" for j in range(start, start + n)]),
            "kind": pa.array(["click", "purchase"] * (n // 2) + ["click"] * (n % 2)),
            "user_id": pa.array([j % 5000 for j in range(start, start + n)], pa.int32()),
            "page": pa.array(["/product/1"] * n),
            "event_time": pa.array([1_790_000_000_000_000 + j for j in range(n)], pa.timestamp("us", tz="UTC")),
            "amount": pa.array([j * 0.01 for j in range(n)], pa.float64()),
            "kafka_topic": pa.array(["sample-events"] * n),
            "kafka_partition": pa.array([0] * n, pa.int32()),
            "kafka_offset": offsets,
        })
        path = data / f"part-{i:05d}.parquet"
        pq.write_table(table, path, row_group_size=131_072)
        files.append(str(path))
    Manifest(pipeline="bench_copy", output_id=1, ranges=[], rows_in=rows, rows_out=rows, rows_rejected=0, bytes_in=0,
             data_files=files, rejected_files=[], job_seconds=0, spark_version="none",
             attempt="a").save(layout.staging_manifest(1, "a"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--url", help="SQLAlchemy URL of a PostgreSQL database (default: the local stack's)")
    args = parser.parse_args(argv)
    cluster = None
    url = args.url
    if url is None:
        from offsetbatch_dev.stack.postgres import PostgresCluster

        cluster = PostgresCluster()
        cluster.start()
        url = cluster.create_database(f"bench_copy_{uuid.uuid4().hex[:6]}")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        stage(Path(tmp), args.rows)
        staged_s = time.monotonic() - t0
        proc = subprocess.run([sys.executable, "-c", CHILD, url, tmp, f"public.bench_copy_{uuid.uuid4().hex[:6]}"],
                              capture_output=True, text=True)
        if proc.returncode:
            print(proc.stdout + proc.stderr, file=sys.stderr)
            return 1
        seconds = json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]
        peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
    result = {"rows": args.rows, "staging_seconds": round(staged_s, 2), "commit_seconds": round(seconds, 2),
              "rows_per_second": round(args.rows / seconds), "commit_peak_rss_mib": round(peak_mib, 1),
              "rss_bound_mib": 500, "within_bound": peak_mib < 500}
    print(json.dumps(result, indent=1))
    return 0 if result["within_bound"] else 2


if __name__ == "__main__":
    sys.exit(main())
