"""The batch job on a Spark standalone cluster against ``local[*]``, and planning at 10,000 partitions.

    python -m offsetbatch_dev.bench.cluster [--records 5000000] [--partitions 8] [--repeat 3]
                                            [--plan-partitions 10000]

1. The local broker, the benchmark data set (``make bench``'s, produced once and shared).
2. A standalone master with one worker of 2 cores (``offsetbatch-stack spark``'s cluster, on its own
   ports and state folder), then the batch job on the same ranges with ``--master local[*]`` and
   ``--master spark://…``, interleaved, ``--repeat`` times, exactly as the spark_job task submits it.
   On this 2-core machine both use the same 2 cores: the ratio is the cost of the cluster's
   executors (a JVM of their own, task shipping, the block manager over loopback), not a speed-up.
3. Planning cost at ``--plan-partitions`` (100 topics of 100 partitions) on PostgreSQL: the first
   plan (every partition new), the commit, the empty plan and the plan of the next batch (one new
   record in every partition).

Writes the medians into ``docs/benchmarks.md`` between the ``cluster`` markers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from offsetbatch.paths import local_dir

from offsetbatch_dev import PROJECT_ROOT
from offsetbatch_dev.bench import ledger_cost, report, throughput
from offsetbatch_dev.bench.dataset import ensure_dataset
from offsetbatch_dev.stack.kafka_broker import KafkaBroker
from offsetbatch_dev.stack.postgres import PostgresCluster
from offsetbatch_dev.stack.spark_cluster import SparkCluster

PLAN_TARGET_S = 2.0


def _median(values: list[float]) -> float:
    return statistics.median(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetbatch_dev.bench.cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--plan-partitions", type=int, default=10_000)
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--docs", default=str(PROJECT_ROOT / "docs"))
    args = parser.parse_args(argv)
    console = Console()
    work = local_dir() / "bench-cluster"
    work.mkdir(parents=True, exist_ok=True)

    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    broker.start()
    ds = ensure_dataset(broker.bootstrap, f"bench-{args.records}-{args.partitions}", args.records, args.partitions)
    console.print(f"data set: {ds.records:,} records, {ds.bytes / 2**20:.0f} MiB, topic {ds.topic}")
    cluster = SparkCluster(port=17077, ui_port=18180, workers=1, cores=2, memory="2g", home=work / "spark")
    cluster.start()
    conf = {**throughput.spark_conf(args.driver_memory), "spark.executor.memory": "1g",
            "spark.driver.host": "127.0.0.1"}
    masters = {"local[*]": "local[*]", "standalone (1 worker, 2 cores)": cluster.master_url}
    samples: dict[str, list[throughput.Sample]] = {k: [] for k in masters}
    try:
        for rep in range(args.repeat):
            for name, master in masters.items():
                s = throughput.batch_job(ds, broker.bootstrap, conf, work, rep, name=f"job-{name[:5]}", master=master)
                if s.records != ds.records:
                    raise RuntimeError(f"{name} read {s.records} records, expected {ds.records}")
                samples[name].append(s)
                console.print(f"run {rep + 1}/{args.repeat} {name}: {s.seconds:.1f}s in app, {s.wall:.1f}s wall, "
                              f"{ds.records / s.seconds:,.0f} records/s")
        apps = [a for a in cluster.status()["completed_apps"] if a["name"].startswith("offsetbatch-")]
        if len(apps) < args.repeat:
            raise RuntimeError(f"the master lists {len(apps)} completed job applications, expected {args.repeat}")
    finally:
        cluster.stop()

    pg = PostgresCluster()
    pg.start()
    costs = []
    for rep in range(args.repeat):
        url = pg.create_database(f"bench_plan_{args.plan_partitions}_{rep}")
        costs.append(ledger_cost.measure(broker.bootstrap, args.plan_partitions, "postgresql", url, work,
                                         "kafka_default", next_batch=True))
        c = costs[-1]
        console.print(f"planning at {args.plan_partitions:,} partitions, run {rep + 1}: first plan {c.first_plan:.2f}s, "
                      f"commit {c.commit:.2f}s, empty plan {c.plan:.2f}s, next batch {c.next_plan:.2f}s")

    rate = {k: _median([ds.records / s.seconds for s in v]) for k, v in samples.items()}
    local, standalone = masters
    ratio = rate[standalone] / rate[local]
    plan = {"first plan (every partition new)": [c.first_plan for c in costs],
            "commit of that batch": [c.commit for c in costs],
            "plan with nothing new": [c.plan for c in costs],
            "plan of the next batch (a new record in every partition)": [c.next_plan for c in costs]}
    table = Table(title=f"batch job, {ds.records:,} records over {args.partitions} partitions", title_justify="left")
    for col in ("master", "records/s (median)", "in-app s per run", "wall s per run"):
        table.add_column(col)
    for k, v in samples.items():
        table.add_row(k, f"{rate[k]:,.0f}", ", ".join(f"{s.seconds:.1f}" for s in v), ", ".join(f"{s.wall:.1f}" for s in v))
    console.print(table)
    console.print(f"standalone / local[*] throughput: {ratio:.2f}")
    for k, v in plan.items():
        console.print(f"{args.plan_partitions:,} partitions, PostgreSQL, {k}: median {_median(v):.2f}s")

    doc = Path(args.docs) / "benchmarks.md"
    steady = _median(plan["plan of the next batch (a new record in every partition)"])
    report.write_section(doc, "cluster", [
        "## Spark standalone cluster vs local[*]; planning at 10,000 partitions",
        "",
        f"`python -m offsetbatch_dev.bench.cluster --records {args.records} --partitions {args.partitions} "
        f"--repeat {args.repeat} --plan-partitions {args.plan_partitions}`, {time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} cores. The batch job on the same {ds.records:,} records ({ds.bytes / 2**20:.0f} MiB), "
        f"submitted as the spark_job task does, interleaved, medians of {args.repeat}. The standalone master has one "
        f"worker with 2 cores and 2 GiB (executor 1 GiB); the driver runs in client mode on the same host. Both use "
        f"this machine's 2 cores, so the ratio is what the cluster's separate executor JVM and task shipping cost, "
        f"not a speed-up.",
        "",
        "| master | records/s (median) | in-app seconds per run | wall seconds per run |",
        "| --- | ---: | --- | --- |",
        *[f"| {k} | {rate[k]:,.0f} | {', '.join(f'{s.seconds:.1f}' for s in v)} | "
          f"{', '.join(f'{s.wall:.1f}' for s in v)} |" for k, v in samples.items()],
        "",
        f"**standalone / local[*]: {ratio:.2f}×**",
        "",
        f"Planning at {args.plan_partitions:,} partitions (100 topics × 100) on PostgreSQL, broker round trips "
        f"included (`plan_for_run` under the ledger lock), medians of {args.repeat}; target: under "
        f"{PLAN_TARGET_S:.0f} s.",
        "",
        "| step | seconds (median) | runs |",
        "| --- | ---: | --- |",
        *[f"| {k} | {_median(v):.2f} | {', '.join(f'{x:.2f}' for x in v)} |" for k, v in plan.items()],
        "",
        f"**Planning a batch at {args.plan_partitions:,} partitions: {steady:.2f} s** "
        f"({'meets' if steady < PLAN_TARGET_S else 'misses'} the {PLAN_TARGET_S:.0f} s target).",
    ])
    console.print(f"written to {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
