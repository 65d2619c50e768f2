"""Tables on an S3 API against local disk: the publication's cost by file count and bytes, and a
whole DAG run, on S3Proxy (``offsetbatch-stack s3``).

    python -m offsetbatch_dev.bench.object_storage [--records 1000000] [--repeat 3]

1. **Publication** (``Sink.publish``, exactly the commit's last step) of a staged batch of
   ``files`` Parquet files of ``rows`` rows each, for each of a grid of file counts and file sizes:
   the files sink on local disk (renames) and on S3 (one manifest PUT, nothing moved), the iceberg
   sink on S3 (footers read, one snapshot). On S3 the cost must follow the file count, not the bytes.
2. **Whole DAG run** (``airflow dags test``: plan, spark-submit, commit) of the same ``--records``
   records with the files sink on local disk and on S3, interleaved; the job's own seconds (from
   the ledger) next to the wall time.

Medians of ``--repeat``. Written into ``docs/benchmarks.md`` between the ``object-storage`` markers.
S3Proxy keeps objects in its memory (``offsetbatch_dev.stack.s3_server`` says why): it measures the
protocol's round trips on loopback, not a network's bandwidth.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from offsetbatch.paths import local_dir

from offsetbatch_dev import PROJECT_ROOT

CONN_ID = "s3_bench"
GRID = [(10, 1000), (10, 20000), (100, 1000), (100, 20000), (1000, 1000)]  # (files, rows per file)


def _sample(rows: int, batch_id: int = 1):
    import pyarrow as pa

    return pa.table({
        "event_id": pa.array([f"e{j:09d}" for j in range(rows)]),
        "kind": pa.array(["click"] * rows),
        "user_id": pa.array([j % 5000 for j in range(rows)], pa.int32()),
        "event_time": pa.array([1_790_000_000_000_000 + j for j in range(rows)], pa.timestamp("us", tz="UTC")),
        "kafka_partition": pa.array([0] * rows, pa.int32()),
        "kafka_offset": pa.array(range(rows), pa.int64()),
        "batch_id": pa.array([batch_id] * rows, pa.int64()),
    })


def _file_mb(rows: int) -> float:
    """Size of one of the benchmark's Parquet files of ``rows`` rows (the data is the same every run)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = pa.BufferOutputStream()
    pq.write_table(_sample(rows), out)
    return out.getvalue().size / 1e6


def _write_batch(root: str, batch_id: int, attempt: str, files: int, rows: int, filesystem=None) -> None:
    """``files`` Parquet files of ``rows`` sample events and their manifest, staged as the job does."""
    import pyarrow.parquet as pq

    from offsetbatch.jobspec import Manifest
    from offsetbatch.sinks.staging import StagingLayout

    layout = StagingLayout(root)
    data = layout.staging_data(batch_id, attempt)
    table = _sample(rows, batch_id)
    paths = []
    for i in range(files):
        uri = f"{data}/part-{i:05d}.parquet"
        if filesystem is None:
            Path(uri).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, uri)
        else:
            pq.write_table(table, uri.partition("://")[2], filesystem=filesystem)
        paths.append(uri)
    Manifest(pipeline="bench_s3", output_id=batch_id, ranges=[], rows_in=files * rows, rows_out=files * rows,
             rows_rejected=0, bytes_in=0, data_files=paths, rejected_files=[], job_seconds=0, spark_version="none",
             attempt=attempt).save(layout.staging_manifest(batch_id, attempt))


def publication_costs(server, work: Path, rep: int) -> dict[tuple[int, int], dict[str, float]]:
    from offsetbatch.sinks import sink_for

    fs = server.filesystem()
    out: dict[tuple[int, int], dict[str, float]] = {}
    for n, (files, rows) in enumerate(GRID):
        base = f"s3a://bench/r{rep}-{n}"
        sinks = {
            "files, local disk": sink_for("bench_s3", {"type": "files", "path": str(work / f"r{rep}-{n}" / "files")}),
            "files, S3": sink_for("bench_s3", {"type": "files", "path": f"{base}/files", "storage_conn_id": CONN_ID}),
            "iceberg, S3": sink_for("bench_s3", {"type": "iceberg", "path": f"{base}/staging", "namespace": "bench",
                                                 "table": f"t{rep}_{n}", "warehouse": f"{base}/warehouse",
                                                 "catalog": f"sqlite:///{work}/catalog.db", "storage_conn_id": CONN_ID}),
        }
        out[(files, rows)] = {}
        for name, sink in sinks.items():
            _write_batch(sink.settings.root, 1, "a1", files, rows, None if "local" in name else fs)
            t0 = time.perf_counter()
            sink.publish(1, 1, "a1", kind="incremental")
            out[(files, rows)][name] = time.perf_counter() - t0
        fs.delete_dir_contents(base.partition("://")[2], missing_dir_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetbatch_dev.bench.object_storage",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--docs", default=str(PROJECT_ROOT / "docs"))
    args = parser.parse_args(argv)
    console = Console()

    from offsetbatch_dev.bench import report, throughput
    from offsetbatch_dev.bench.__main__ import _airflow_env
    from offsetbatch_dev.bench.dataset import ensure_dataset
    from offsetbatch_dev.stack.kafka_broker import KafkaBroker
    from offsetbatch_dev.stack.s3_server import S3Server

    work = local_dir() / "bench-s3"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    server = S3Server(port=int(os.environ.get("S3_PORT", "19500")), buckets=["bench"])
    server.start()
    conn = json.dumps(server.connection())
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = conn

    pubs = [publication_costs(server, work / f"pub-{rep}", rep) for rep in range(args.repeat)]
    names = list(pubs[0][GRID[0]])
    med = {cell: {name: statistics.median(p[cell][name] for p in pubs) for name in names} for cell in GRID}

    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    broker.start()
    ds = ensure_dataset(broker.bootstrap, f"bench-{args.records}-{args.partitions}", args.records, args.partitions)
    # one Airflow home per target: a DAG's Asset URI (the table) must not change between its runs
    envs = {name: {**_airflow_env(work / key, broker.bootstrap), f"AIRFLOW_CONN_{CONN_ID.upper()}": conn}
            for name, key in (("local disk", "local"), ("S3 (S3Proxy)", "s3"))}
    targets = {"local disk": None,
               "S3 (S3Proxy)": {"path": "s3a://bench/dag/table", "storage_conn_id": CONN_ID,
                                "event_time_column": "event_time"}}
    runs: dict[str, list[tuple[float, float, float]]] = {t: [] for t in targets}
    for rep in range(args.repeat):
        for name, sink in targets.items():
            server.filesystem().delete_dir_contents("bench/dag", missing_dir_ok=True)
            key = "local" if sink is None else "s3"
            sample, stats = throughput.whole_dag_run(ds, envs[name], work / key, rep, args.driver_memory, sink=sink)
            runs[name].append((sample.wall, stats.get("job_seconds") or 0.0, stats.get("commit_seconds") or 0.0))
            console.print(f"DAG run {rep + 1}/{args.repeat} {name}: {sample.wall:.1f}s wall, job {runs[name][-1][1]:.1f}s, "
                          f"{stats['rows_out']:,} rows")
    dag = {t: tuple(statistics.median(r[i] for r in v) for i in range(3)) for t, v in runs.items()}
    server.stop()

    table = Table(title="publication (s) by files x rows per file")
    table.add_column("files x rows/file")
    table.add_column("MB")
    for name in names:
        table.add_column(name)
    mb = {cell: cell[0] * _file_mb(cell[1]) for cell in GRID}
    for cell in GRID:
        table.add_row(f"{cell[0]:,} x {cell[1]:,}", f"{mb[cell]:.1f}", *[f"{med[cell][n]:.3f}" for n in names])
    console.print(table)
    local, s3 = dag["local disk"], dag["S3 (S3Proxy)"]
    report.write_section(Path(args.docs) / "benchmarks.md", "object-storage", [
        "## Tables on an S3 API (S3Proxy) against local disk",
        "",
        f"`python -m offsetbatch_dev.bench.object_storage --records {args.records} --repeat {args.repeat}`, "
        f"{time.strftime('%Y-%m-%d')}, medians of {args.repeat}. S3Proxy 2.6.0 on loopback, objects in its memory: "
        f"the S3 protocol's requests without a network's bandwidth.",
        "",
        "**Publication** (`Sink.publish`, the commit's last step) of one staged batch. On S3 nothing is moved: the "
        "files sink writes one manifest, the iceberg sink reads each file's footer and commits one snapshot.",
        "",
        "| files × rows per file | MB | " + " | ".join(f"{n} (s)" for n in names) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in names) + " |",
        *[f"| {c[0]:,} × {c[1]:,} | {mb[c]:.1f} | " + " | ".join(f"{med[c][n]:.3f}" for n in names) + " |" for c in GRID],
        "",
        f"17× the bytes in the same 10 files: files sink on S3 {med[(10, 20000)]['files, S3'] / med[(10, 1000)]['files, S3']:.1f}×, "
        f"iceberg on S3 {med[(10, 20000)]['iceberg, S3'] / med[(10, 1000)]['iceberg, S3']:.1f}× the time; "
        f"100× the files at the same size: files sink on S3 {med[(1000, 1000)]['files, S3'] / med[(10, 1000)]['files, S3']:.1f}×, "
        f"iceberg on S3 {med[(1000, 1000)]['iceberg, S3'] / med[(10, 1000)]['iceberg, S3']:.1f}×.",
        "",
        f"**Whole DAG run** (`airflow dags test`: plan, spark-submit, commit) of {args.records:,} records "
        f"({args.partitions} partitions), files sink, interleaved:",
        "",
        "| table on | wall (s) | job (s) | ledger commit (s) |",
        "| --- | ---: | ---: | ---: |",
        f"| local disk | {local[0]:.1f} | {local[1]:.1f} | {local[2]:.2f} |",
        f"| S3 (S3Proxy, S3A magic committer) | {s3[0]:.1f} | {s3[1]:.1f} | {s3[2]:.2f} |",
        f"| S3 / local | {s3[0] / local[0]:.2f}× | {s3[1] / local[1]:.2f}× | |",
        "",
        "Runs (wall s): " + "; ".join(f"{t} {', '.join(f'{r[0]:.1f}' for r in v)}" for t, v in runs.items()) + ".",
    ])
    console.print(f"written to {Path(args.docs) / 'benchmarks.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
