"""The delta sink's cost beside the iceberg and files sinks: the commit of one batch, and a table
grown to 2,880 batches before and after a maintenance pass.

    python -m offsetbatch_dev.bench.delta_sink [--repeat 3] [--batches 2880] [--retain 2m] [--maintain-every 15]

1. **Commit of one batch**: Parquet staged where the Spark job leaves it, in two shapes (8 files of
   125,000 rows: a 1,000,000-record job on 8 partitions; 1,000 files of 1,000 rows), then exactly
   the commit's publication (``Sink.publish``) by the files sink (renames), the iceberg sink (move,
   footers, one snapshot in a SQLite catalog) and the delta sink (delta-rs writes the rows into the
   table, one commit): the first batch (table created), a second appended, a replay of the first.
   Interleaved per repetition; medians.
2. **Growth**: a delta sink grown to ``--batches`` batches of 1,000 rows through the commit task's
   own function (``commit.protocol.commit_batch``, a SQLite ledger; growth.py's staging), in real
   time (delta-rs stamps its log with the wall clock), with an ``offsetbatch maintain`` pass every
   ``--maintain-every`` batches (0: none: delta-rs's commit costs grow with the table's files, 121 ms
   a write at 1,200 one-batch files in a profile); then one more pass
   (``retain`` for the log, ``min_input_files`` 4, 128 MiB target), then 10 more batches. Commit
   times (median of batches 2-11 and of the last 10), the table's files and log, opening the table,
   ``published_ids`` and a full Polars read, at 10, at N, after the pass.

Written into ``docs/benchmarks.md`` between the ``delta-sink`` markers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from rich.console import Console

from offsetbatch.paths import local_dir

from offsetbatch_dev import PROJECT_ROOT

STEPS = {"first": "first batch (table created)", "append": "second batch (appended)",
         "replay": "replay of the first (its rows replaced, one commit)"}
SHAPES = ((8, 125_000), (1000, 1000))
SINKS = ("files", "iceberg", "delta")


def commit_costs(work: Path, files: int, rows: int) -> dict[str, dict[str, float]]:
    """Seconds of ``publish`` per sink and step, one repetition in a fresh folder."""
    from offsetbatch.sinks import sink_for

    from offsetbatch_dev.bench.iceberg_sink import _stage

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sinks = {
        "files": sink_for("bench_delta", {"type": "files", "path": str(work / "files")}),
        "iceberg": sink_for("bench_delta", {"type": "iceberg", "path": str(work / "staging-i"), "namespace": "bench",
                                            "table": "events", "warehouse": str(work / "warehouse"),
                                            "catalog": f"sqlite:///{work}/catalog.db"}),
        "delta": sink_for("bench_delta", {"type": "delta", "staging": str(work / "staging-d"),
                                          "table": str(work / "delta" / "events")}),
    }
    out: dict[str, dict[str, float]] = {name: {} for name in sinks}
    for step, (batch_id, output_id, kind) in {"first": (1, 1, "incremental"), "append": (2, 2, "incremental"),
                                              "replay": (3, 1, "replay")}.items():
        for name, sink in sinks.items():
            _stage(Path(sink.settings.root), batch_id, output_id, f"a{batch_id}", files, rows)
            t0 = time.perf_counter()
            sink.publish(batch_id, output_id, f"a{batch_id}", kind=kind)
            out[name][step] = time.perf_counter() - t0
    shutil.rmtree(work, ignore_errors=True)
    return out


def table_figures(pipeline) -> dict[str, float]:
    """What the table holds and costs to open and read: files in the current version and on disk,
    the log's JSON entries and checkpoints, and the times of opening it, ``published_ids`` and a
    full Polars read."""
    import polars as pl
    from deltalake import DeltaTable

    from offsetbatch.sinks import sink_for

    location = pipeline.cfg.sink.table
    t0 = time.perf_counter()
    table = DeltaTable(location)
    opened = time.perf_counter() - t0
    t0 = time.perf_counter()
    ids = sink_for(pipeline.name, pipeline.cfg.sink).published_ids()
    published = time.perf_counter() - t0
    t0 = time.perf_counter()
    rows = pl.read_delta(location).height
    read = time.perf_counter() - t0
    log = Path(location, "_delta_log")
    on_disk = [f for f in Path(location).rglob("*.parquet") if "_delta_log" not in f.parts]
    return {"version": table.version(), "files": len(table.file_uris()), "files on disk": len(on_disk),
            "data MiB": sum(f.stat().st_size for f in on_disk) / 2**20,
            "log JSON entries": sum(1 for f in log.iterdir() if f.name.endswith(".json")),
            "checkpoints": sum(1 for f in log.iterdir() if ".checkpoint." in f.name),
            "log MiB": sum(f.stat().st_size for f in log.iterdir() if f.is_file()) / 2**20,
            "open ms": opened * 1000, "published_ids ms": published * 1000, "published": len(ids),
            "full read ms": read * 1000, "rows": rows}


def grow(work: Path, n: int, retain: str, every: int, console: Console) -> dict:
    from offsetbatch.pipeline import Pipeline

    from offsetbatch_dev.bench import growth

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    args = argparse.Namespace(retain=retain, in_flight_grace="1m", ledger_retain="90d", retain_snapshots=10)
    pipeline = Pipeline.load(growth.sink_config(work, "delta", "growth_delta", None, args))
    ledger = pipeline.ledger(create=True)
    step = timedelta(minutes=1)
    base = datetime.now(timezone.utc).replace(second=0, microsecond=0) - n * step
    clock = growth.SimClock(base)  # a holder of the batch's interval end; nothing is patched
    out: dict = {"commits": [], "after": [], "passes": []}
    try:
        for i in range(1, n + 1):
            out["commits"].append(growth.commit_one(pipeline, ledger, clock, i, base, step, 1000))
            if every and i % every == 0 and i < n:  # the maintenance DAG's schedule, between two runs
                t0 = time.perf_counter()
                _, error = growth.run_maintenance(pipeline, ledger, datetime.now(timezone.utc))
                if error:
                    out["maintenance_error"] = error
                out["passes"].append(time.perf_counter() - t0)
            if i == 10:
                out["10"] = table_figures(pipeline)
            if i % max(1, n // 10) == 0:
                console.log(f"delta sink: {i:,}/{n:,} batches, last commit {out['commits'][-1] * 1000:.0f} ms")
        out["N"] = table_figures(pipeline)
        pass_, error = growth.run_maintenance(pipeline, ledger, datetime.now(timezone.utc))
        out["maintenance"], out["maintenance_error"] = pass_, error
        out["maintained"] = table_figures(pipeline)
        for i in range(n + 1, n + 11):
            out["after"].append(growth.commit_one(pipeline, ledger, clock, i, base, step, 1000))
        out["after 10"] = table_figures(pipeline)
    finally:
        ledger.dispose()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetbatch_dev.bench.delta_sink", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batches", type=int, default=2880)
    parser.add_argument("--retain", default="2m", help="the pass's maintenance.retain (the log's retention)")
    parser.add_argument("--maintain-every", type=int, default=15, help="batches between maintenance passes while the "
                        "table grows (the maintenance DAG's schedule; 0: none until the end)")
    parser.add_argument("--skip-growth", action="store_true")
    parser.add_argument("--docs", default=str(PROJECT_ROOT / "docs"))
    args = parser.parse_args(argv)
    console = Console()
    work = local_dir() / "bench-delta"
    load = os.getloadavg()
    started = time.time()

    commit: dict[tuple[int, int], list[dict]] = {}
    for files, rows in SHAPES:
        commit[(files, rows)] = []
        for rep in range(args.repeat):
            c = commit_costs(work / f"commit-{files}-{rep}", files, rows)
            commit[(files, rows)].append(c)
            console.print(f"{files:,} x {rows:,} rep {rep + 1}: " + ", ".join(
                f"{s} {step} {c[s][step]:.3f}s" for s in SINKS for step in STEPS))
    med = {shape: {s: {step: statistics.median(c[s][step] for c in reps) for step in STEPS} for s in SINKS}
           for shape, reps in commit.items()}

    from offsetbatch_dev.bench import report

    lines = [
        "## Delta sink: commit of one batch beside the iceberg and files sinks, and 2,880 batches with maintenance",
        "",
        f"`python -m offsetbatch_dev.bench.delta_sink --repeat {args.repeat} --batches {args.batches} --retain "
        f"{args.retain}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, load average at the start "
        f"{load[0]:.2f}, 2 cores. Commit: exactly the commit task's publication (`Sink.publish`) of one staged batch, "
        f"sinks interleaved per step, medians of {args.repeat}: the files sink renames, the iceberg sink moves the "
        f"files and commits one snapshot (SQLite catalog), the delta sink writes the rows into the table with "
        f"delta-rs and commits once.",
        "",
        "| batch | step | files (s) | iceberg (s) | delta (s) | delta / iceberg |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for (files, rows), m in med.items():
        for step in STEPS:
            lines.append(f"| {files:,} files × {rows:,} rows | {STEPS[step]} | {m['files'][step]:.3f} | "
                         f"{m['iceberg'][step]:.3f} | {m['delta'][step]:.3f} | "
                         f"{m['delta'][step] / m['iceberg'][step]:.2f}× |")
    lines.append("")
    lines.append("Runs (s): " + "; ".join(
        f"{files:,}×{rows:,} {s} {step} " + ", ".join(f"{c[s][step]:.3f}" for c in reps)
        for (files, rows), reps in commit.items() for s in SINKS for step in STEPS) + ".")

    if not args.skip_growth:
        g = grow(work / "growth", args.batches, args.retain, args.maintain_every, console)
        c10, cN, cA = (statistics.median(g["commits"][1:11]), statistics.median(g["commits"][-10:]),
                       statistics.median(g["after"]))
        keys = ("version", "files", "files on disk", "data MiB", "log JSON entries", "checkpoints", "log MiB",
                "open ms", "published_ids ms", "full read ms", "rows")
        lines += [
            "",
            f"**Growth** to {args.batches:,} batches of 1,000 rows (one staged file each) through "
            f"`commit.protocol.commit_batch` (SQLite ledger), in real time, "
            + (f"an `offsetbatch maintain` pass every {args.maintain_every} batches (as a maintenance DAG would run; "
               f"{len(g['passes'])} passes, median {statistics.median(g['passes']):.2f} s)" if g["passes"] else
               "no maintenance while it grows")
            + f"; then one more pass (`retain: {args.retain}`, `in_flight_grace: 1m`, 128 MiB target, "
              f"`min_input_files` 4), then 10 batches.",
            "",
            f"Commit + publish, median: batches 2–11 **{c10 * 1000:.0f} ms**, the last 10 of {args.batches:,} "
            f"**{cN * 1000:.0f} ms** ({cN / c10:.2f}×), the 10 after the pass **{cA * 1000:.0f} ms** ({cA / c10:.2f}×).",
            "",
            "| figure | at 10 | at N | after the pass | 10 batches later |",
            "| --- | ---: | ---: | ---: | ---: |",
            *[f"| {k} | " + " | ".join(_f(g[p].get(k)) for p in ("10", "N", "maintained", "after 10")) + " |"
              for k in keys],
            "",
            "The pass: " + (", ".join(f"{a['step']} on {a['target'].rsplit('/', 1)[-1]}: {a['done']} in {a['seconds']:.2f} s"
                                      for a in (g["maintenance"] or {}).get("actions", []))
                            if g["maintenance"] else f"did not run: {g['maintenance_error']}") + ".",
        ]
    report.write_section(Path(args.docs) / "benchmarks.md", "delta-sink", lines)
    console.print("\n".join(lines))
    return 0


def _f(v) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.1f}" if isinstance(v, float) else f"{v:,}"


if __name__ == "__main__":
    raise SystemExit(main())
