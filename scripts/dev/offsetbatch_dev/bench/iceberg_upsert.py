"""The iceberg sink's upsert refresh on a large table: seconds and peak RSS per batch, against
appending the same changes.

    python -m offsetbatch_dev.bench.iceberg_upsert [--table-rows 10000000] [--baseline-rows 2000000] [--batch 100000]
        [--batches 3]

A SQLite SQL catalog and a local warehouse. The seed: ``--table-rows`` keys written straight into
both tables (``<table>_changes`` and the upserted ``<table>``, the latter marked as reflecting the
former), as if the pipeline had run up to there. Then ``--batches`` batches of ``--batch`` changes
(20 % new keys, 70 % updates, 10 % deletes, versions increasing): each is appended to
``<table>_changes`` (what the batch's snapshot does, timed as the append baseline), then
``upsert.refresh`` brings ``<table>`` up to it in a child process (its wall time and ``VmHWM``:
the commit's extra cost in upsert mode). The same runs first on a table of ``--baseline-rows``:
the refresh's memory must not grow with the table. Writes the ``bench-iceberg-upsert`` section of
docs/benchmarks.md. Runnable alone; not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from offsetbatch_dev import PROJECT_ROOT
from offsetbatch_dev.bench import report

CHANGES, VIEW = ("bench", "accounts_changes"), ("bench", "accounts")
CHILD = """
import json, re, sys, time
from pyiceberg.catalog.sql import SqlCatalog
from offsetbatch.sinks.iceberg import upsert
catalog = SqlCatalog("bench", uri=sys.argv[1], warehouse=sys.argv[2])
rule = upsert.UpsertRule(["id"], "lsn", "deleted")
t0 = time.monotonic()
done = upsert.refresh(catalog, ("bench", "accounts_changes"), ("bench", "accounts"), rule, "bench", sys.argv[2] + "/v")
hwm = re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)
print(json.dumps({"seconds": time.monotonic() - t0, "peak_kib": int(hwm), "touched": done.touched,
                  "written": done.written}))
"""
CHUNK = 1_000_000


def _rows(ids: list[int], deleted: list[bool], lsn0: int, offset0: int, batch_id: int):
    import pyarrow as pa

    n = len(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()), "name": pa.array([f"name-{k}-{batch_id}" for k in ids]),
        "balance": pa.array([(k * 7 + batch_id) % 100_000 for k in ids], pa.int64()),
        "deleted": pa.array(deleted, pa.bool_()), "lsn": pa.array(range(lsn0, lsn0 + n), pa.int64()),
        "kafka_topic": pa.array(["accounts"] * n), "kafka_partition": pa.array([0] * n, pa.int32()),
        "kafka_offset": pa.array(range(offset0, offset0 + n), pa.int64()),
        "batch_id": pa.array([batch_id] * n, pa.int64()),
    })


def _seed(catalog, rows: int) -> float:
    """Both tables, ``rows`` keys each, in chunks (the bench's memory, not the commit's)."""
    from offsetbatch.sinks.iceberg.upsert import CHANGES_SNAPSHOT

    t0 = time.monotonic()
    catalog.create_namespace("bench")
    first = _rows([0], [False], 0, 0, 1)
    changes = catalog.create_table(CHANGES, schema=first.schema)
    view = catalog.create_table(VIEW, schema=changes.schema())
    for start in range(0, rows, CHUNK):
        ids = list(range(start, min(rows, start + CHUNK)))
        chunk = _rows(ids, [False] * len(ids), start, start, 1).cast(changes.schema().as_arrow())
        changes.append(chunk)
        last = start + CHUNK >= rows  # the view's last chunk says which changes snapshot it reflects
        view.append(chunk, snapshot_properties={CHANGES_SNAPSHOT: str(changes.current_snapshot().snapshot_id)}
                    if last else {})
    return time.monotonic() - t0


def _refresh(catalog_url: str, warehouse: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, catalog_url, warehouse], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(proc.stdout[-3000:] + proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(table_rows: int, batch: int, batches: int) -> tuple[float, list[dict], int]:
    """Seed a table of ``table_rows`` keys, then refresh ``batches`` batches of ``batch`` changes:
    (seed seconds, one result per batch, the upserted table's rows at the end)."""
    from pyiceberg.catalog.sql import SqlCatalog

    rng = random.Random(44)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        url, warehouse = f"sqlite:///{tmp}/catalog.db", f"file://{tmp}/warehouse"
        catalog = SqlCatalog("bench", uri=url, warehouse=warehouse)
        seeded = _seed(catalog, table_rows)
        print(f"seeded both tables with {table_rows:,} keys in {seeded:.1f} s", flush=True)
        next_id, lsn = table_rows, table_rows
        for batch_id in range(2, 2 + batches):
            n_new, n_del = batch * 20 // 100, batch * 10 // 100
            existing = rng.sample(range(next_id), k=batch - n_new)
            ids = list(range(next_id, next_id + n_new)) + existing
            deleted = [False] * (batch - n_del) + [True] * n_del
            next_id += n_new
            changes = catalog.load_table(CHANGES)
            t0 = time.monotonic()
            changes.append(_rows(ids, deleted, lsn, lsn, batch_id).cast(changes.schema().as_arrow()))
            appended = time.monotonic() - t0
            lsn += len(ids)
            out = _refresh(url, warehouse)
            results.append({"table_rows": table_rows, "batch": batch_id, "changes": len(ids), "append": appended, **out})
            print(f"{table_rows:,} rows, batch {batch_id}: append {appended:.2f} s; refresh {out['seconds']:.2f} s "
                  f"({len(ids) / out['seconds']:,.0f} changes/s, {out['touched']:,} keys, {out['written']:,} rows), "
                  f"peak RSS {out['peak_kib'] / 1024:.0f} MiB", flush=True)
        view = catalog.load_table(VIEW)
        rows = sum(t.file.record_count for t in view.scan().plan_files())
    return seeded, results, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table-rows", type=int, default=10_000_000)
    parser.add_argument("--baseline-rows", type=int, default=2_000_000,
                        help="a smaller table measured first, the same way: does the commit's memory grow with the table?")
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=3)
    args = parser.parse_args(argv)
    _, small, _ = measure(args.baseline_rows, args.batch, args.batches)
    seeded, results, rows = measure(args.table_rows, args.batch, args.batches)
    worst = max(r["seconds"] + r["append"] for r in results)
    peak = {n: max(r["peak_kib"] for r in rs) / 1024 for n, rs in ((args.baseline_rows, small), (args.table_rows, results))}
    command = report.command_line("offsetbatch_dev.bench.iceberg_upsert", argv)
    lines = ["## Iceberg upserts: the refresh of a large upserted table", "",
             f"{report.stamp(command)}. Both tables seeded with {args.table_rows:,} keys ({seeded:.0f} s; "
             f"{CHUNK:,} rows a data file), then {args.batches} batches of {args.batch:,} changes (20 % new keys, 70 % "
             f"updates, 10 % deletes): each appended to `<table>_changes` (the batch's snapshot, as append mode writes "
             f"it), then `upsert.refresh` in a child process (its wall time and `VmHWM`). The same first on a table of "
             f"{args.baseline_rows:,} keys, the baseline for memory. SQLite catalog, local warehouse.", "",
             "| table rows | batch | changes | append to `_changes` (s) | refresh (s) | changes/s | keys touched | "
             "rows written | refresh peak RSS (MiB) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['table_rows']:,} | {r['batch']} | {r['changes']:,} | {r['append']:.2f} | {r['seconds']:.2f} | "
              f"{r['changes'] / r['seconds']:,.0f} | {r['touched']:,} | {r['written']:,} | {r['peak_kib'] / 1024:.0f} |"
              for r in small + results]
    lines += ["", f"Slowest batch commit at {args.table_rows:,} rows (append + refresh): **{worst:.1f} s** (target ≤ 60 "
              f"s); the upserted table holds {rows:,} rows after the last batch. Peak RSS of the refresh: "
              f"{peak[args.table_rows]:.0f} MiB at {args.table_rows:,} rows against {peak[args.baseline_rows]:.0f} MiB "
              f"at {args.baseline_rows:,}: {peak[args.table_rows] / peak[args.baseline_rows]:.2f}× the memory for "
              f"{args.table_rows / args.baseline_rows:.0f}× the table (the refresh holds the touched keys' changes and "
              f"the data files being rewritten, by pyiceberg's worker threads, never the table)."]
    report.write_section(PROJECT_ROOT / "docs" / "benchmarks.md", "bench-iceberg-upsert", lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
