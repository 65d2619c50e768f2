"""The postgres sink's upsert commit on a large table: changes/s and peak RSS, against a plain append.

    python -m offsetbatch_dev.bench.postgres_upsert [--table-rows 10000000] [--batch 100000] [--batches 3]

Builds an upsert table of ``--table-rows`` keys through the sink itself (one seeding commit, timed
apart), then commits ``--batches`` batches of ``--batch`` changes each (20 % new keys, 70 % updates,
10 % deletes, versions increasing) with ``PostgresSink.publish_in_transaction`` inside
``Ledger.lock``, exactly what the commit task runs, each in a child process (its wall time and
``VmHWM``: the commit's memory). The baselines: the same rows appended (``mode: append``) to a
table of the same size, and the upsert a team writes by hand (``peers/jdbc_upsert.py``: Spark's
JDBC writer to a staging table, then ``INSERT … ON CONFLICT``; not atomic). Staged Parquet is written where the Spark job would leave it. Writes the
``bench-postgres-upsert`` section of docs/benchmarks.md. Runnable alone; not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from offsetbatch_dev import PROJECT_ROOT
from offsetbatch_dev.bench import report
from offsetbatch_dev.bench.peers.jdbc_upsert import JdbcUpsert

CHILD = """
import json, re, sys, time
from offsetbatch.ledger import Ledger
from offsetbatch.sinks.postgres import PostgresSettings, PostgresSink
url, staging, table, mode, batch_id = sys.argv[1:6]
settings = dict(mode="upsert", key=["id"], version_column="lsn", delete_column="deleted") if mode == "upsert" else {}
with Ledger(url, create=True) as ledger:
    sink = PostgresSink("bench_upsert", PostgresSettings(path=staging, table=table, url=url, **settings))
    t0 = time.monotonic()
    with ledger.lock("bench_upsert") as conn:
        sink.publish_in_transaction(conn, int(batch_id), int(batch_id), "a", ledger.identity)
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report its parent's peak
    hwm = re.search(r"VmHWM:\s+(\d+) kB", open("/proc/self/status").read()).group(1)
    print(json.dumps({"seconds": time.monotonic() - t0, "peak_kib": int(hwm)}))
"""
CHUNK = 500_000


def stage(root: Path, batch_id: int, ids: list[int], deleted: list[bool], lsn0: int, offset0: int) -> list[str]:
    """One batch's rows as Parquet plus a manifest, attempt 'a' (as the job stages them); the files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from offsetbatch.jobspec import Manifest
    from offsetbatch.sinks.staging import StagingLayout

    layout = StagingLayout(str(root))
    data = Path(layout.staging_data(batch_id, "a"))
    data.mkdir(parents=True, exist_ok=True)
    files = []
    for i, start in enumerate(range(0, len(ids), CHUNK)):
        part_ids = ids[start:start + CHUNK]
        n = len(part_ids)
        offsets = range(offset0 + start, offset0 + start + n)
        table = pa.table({
            "id": pa.array(part_ids, pa.int64()),
            "name": pa.array([f"name-{k}-{batch_id}" for k in part_ids]),
            "balance": pa.array([(k * 7 + batch_id) % 100_000 for k in part_ids], pa.int64()),
            "deleted": pa.array(deleted[start:start + n], pa.bool_()),
            "lsn": pa.array([lsn0 + o for o in offsets], pa.int64()),
            "kafka_topic": pa.array(["accounts"] * n),
            "kafka_partition": pa.array([0] * n, pa.int32()),
            "kafka_offset": pa.array(offsets, pa.int64()),
        })
        path = data / f"part-{i:05d}.parquet"
        pq.write_table(table, path, row_group_size=131_072)
        files.append(str(path))
    Manifest(pipeline="bench_upsert", output_id=batch_id, ranges=[], rows_in=len(ids), rows_out=len(ids),
             rows_rejected=0, bytes_in=0, data_files=files, rejected_files=[], job_seconds=0, spark_version="none",
             attempt="a").save(layout.staging_manifest(batch_id, "a"))
    return files


def commit(url: str, staging: Path, table: str, mode: str, batch_id: int) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of one commit in a child process (its own ``VmHWM``)."""
    proc = subprocess.run([sys.executable, "-c", CHILD, url, str(staging), table, mode, str(batch_id)],
                          capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(proc.stdout[-3000:] + proc.stderr[-3000:])
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["seconds"], out["peak_kib"] / 1024


def _peak(row: dict) -> str:
    return "—" if row["peak"] is None else f"{row['peak']:.0f}"  # the peer runs in this process: not measured


def _analyze(url: str, tables) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        for table in [*tables, "public.bench_upsert_changes"]:
            conn.execute(sa.text(f"VACUUM ANALYZE {table}"))
    engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table-rows", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--url", help="SQLAlchemy URL of a PostgreSQL database (default: the local stack's)")
    args = parser.parse_args(argv)
    url = args.url
    if url is None:
        from offsetbatch_dev.stack.postgres import PostgresCluster

        cluster = PostgresCluster()
        cluster.start()
        database = f"bench_upsert_{uuid.uuid4().hex[:6]}"
        url = cluster.create_database(database)
    try:
        return _run(args, url)
    finally:
        if args.url is None:
            cluster.drop_database(database)  # some 4 GB at the default size


def _run(args: argparse.Namespace, url: str) -> int:
    rng = random.Random(44)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        staging = {mode: Path(tmp) / mode for mode in ("upsert", "append")}
        tables = {"upsert": "public.bench_upsert", "append": "public.bench_append"}
        seed_ids = list(range(args.table_rows))
        seeded = {}
        for mode in ("upsert", "append"):
            t0 = time.monotonic()
            stage(staging[mode], 1, seed_ids, [False] * len(seed_ids), 0, 0)
            staged_s = time.monotonic() - t0
            seconds, peak = commit(url, staging[mode], tables[mode], mode, 1)
            seeded[mode] = (staged_s, seconds, peak)
            print(f"seeded {mode}: {args.table_rows:,} rows staged in {staged_s:.1f} s, committed in {seconds:.1f} s "
                  f"({args.table_rows / seconds:,.0f} rows/s), peak RSS {peak:.0f} MiB", flush=True)
        _analyze(url, tables.values())  # a table this size has been, by autovacuum, before its next batch
        peer = JdbcUpsert(url)
        peer_seed = peer.seed_from(tables["upsert"])
        peer.start()
        print(f"seeded the hand-written peer's table from the upsert table in {peer_seed:.1f} s", flush=True)
        live = set(seed_ids)
        next_id, lsn, offset = args.table_rows, args.table_rows, args.table_rows
        for batch_id in range(2, 2 + args.batches):
            n_new, n_del = args.batch * 20 // 100, args.batch * 10 // 100
            n_upd = args.batch - n_new - n_del
            pool = rng.sample(sorted(live) if len(live) < 200_000 else range(next_id), k=(n_upd + n_del) * 2)
            existing = [k for k in pool if k in live][:n_upd + n_del]
            ids = list(range(next_id, next_id + n_new)) + existing
            deleted = [False] * (n_new + n_upd) + [True] * n_del
            order = list(range(len(ids)))
            rng.shuffle(order)
            ids, deleted = [ids[i] for i in order], [deleted[i] for i in order]
            next_id += n_new
            live.update(ids[i] for i in range(len(ids)) if not deleted[i])
            live.difference_update(ids[i] for i in range(len(ids)) if deleted[i])
            for mode in ("upsert", "append"):
                files = stage(staging[mode], batch_id, ids, deleted, lsn, offset)
                if mode == "upsert":
                    write_s, merge_s = peer.apply(files)
                    rows.append({"mode": "jdbc", "batch": batch_id, "changes": len(ids), "seconds": write_s + merge_s,
                                 "peak": None, "split": (write_s, merge_s)})
                    print(f"batch {batch_id} hand-written JDBC peer: {len(ids):,} changes in {write_s + merge_s:.2f} s "
                          f"(JDBC write {write_s:.2f} s, merge {merge_s:.2f} s)", flush=True)
                seconds, peak = commit(url, staging[mode], tables[mode], mode, batch_id)
                rows.append({"mode": mode, "batch": batch_id, "changes": len(ids), "seconds": seconds, "peak": peak})
                print(f"batch {batch_id} {mode}: {len(ids):,} changes in {seconds:.2f} s ({len(ids) / seconds:,.0f}/s), "
                      f"peak RSS {peak:.0f} MiB", flush=True)
            lsn += len(ids)
            offset += len(ids)
    differ = peer.differences(tables["upsert"])
    peer.stop()
    if differ:
        raise RuntimeError(f"the sink's upsert table and the hand-written peer's differ in {differ} (id, lsn) rows")
    per = {m: [r for r in rows if r["mode"] == m] for m in ("upsert", "append", "jdbc")}
    rate = {m: sum(r["changes"] for r in v) / sum(r["seconds"] for r in v) for m, v in per.items()}
    lines = ["## PostgreSQL upserts: changes per second into a large table", "",
             f"{report.stamp('python -m offsetbatch_dev.bench.postgres_upsert ' + ' '.join(sys.argv[1:]))}. A table "
             f"of {args.table_rows:,} keys (seeded through the sink: upsert {seeded['upsert'][1]:.0f} s, append "
             f"{seeded['append'][1]:.0f} s), then {args.batches} batches of {args.batch:,} changes (20 % new keys, "
             f"70 % updates, 10 % deletes; the tables vacuumed and analyzed after the seed, as autovacuum "
             f"would have), each committed by `publish_in_transaction` in the ledger's transaction "
             f"in a child process, as the commit task does. Append: the same rows into a plain table of the same "
             f"size. Hand-written peer (`bench/peers/jdbc_upsert.py`): Spark's JDBC writer (`local[2]`, "
             f"PostgreSQL's driver 42.7.14, `reWriteBatchedInserts`) appends the same Parquet files to a staging "
             f"table, then `INSERT … ON CONFLICT (id) DO UPDATE … WHERE excluded.lsn > lsn` and a `DELETE` of the "
             f"deleted keys, into a copy of the upsert table (seeded in {peer_seed:.0f} s). It is not atomic: each "
             f"Spark partition commits on its own, the merge is a second transaction, no offsets are recorded, and "
             f"a delete keeps nothing a later older change is checked against. After the last batch both tables "
             f"hold the same (id, lsn) rows.", "",
             "| batch | mode | changes | commit (s) | changes/s | commit peak RSS (MiB) |",
             "| ---: | --- | ---: | ---: | ---: | ---: |"]
    shown = {"upsert": "upsert (sink)", "append": "append (sink)", "jdbc": "hand-written JDBC + merge"}
    lines += [f"| {r['batch']} | {shown[r['mode']]} | {r['changes']:,} | {r['seconds']:.2f}"
              f"{' (write %.2f + merge %.2f)' % r['split'] if r.get('split') else ''} | "
              f"{r['changes'] / r['seconds']:,.0f} | {_peak(r)} |"
              for r in rows]
    lines += ["", f"Upsert: **{rate['upsert']:,.0f} changes/s** (target ≥ 30,000); append: {rate['append']:,.0f} "
              f"rows/s; hand-written JDBC + merge (not atomic): {rate['jdbc']:,.0f} changes/s; upsert / append "
              f"time: {rate['append'] / rate['upsert']:.2f}×; upsert / hand-written time: "
              f"{rate['jdbc'] / rate['upsert']:.2f}×. Peak RSS is the commit "
              f"process's (`VmHWM`); COPY streams one record batch at a time, and the merge runs in PostgreSQL."]
    report.write_section(PROJECT_ROOT / "docs" / "benchmarks.md", "bench-postgres-upsert", lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
