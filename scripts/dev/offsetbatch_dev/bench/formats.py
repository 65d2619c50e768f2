"""The job on the same events in three value formats: JSON, Confluent-framed Avro and Confluent-framed
Protobuf (issue 55: the Protobuf job within 1.3x the Avro job's time). ``make bench``'s ``protobuf``
phase, or ``python -m offsetbatch_dev.bench.formats [--records 1000000] [--repeat 3]``.

The three data sets are ``dataset.event``'s events seeded alike (``bench-<N>-<P>`` JSON,
``avro_dataset``, ``protobuf_dataset``), the schemas resolved from the stand-in registry as the plan
task does, each job submitted as the spark_job task submits it (``throughput.batch_job``: same Spark
settings, same transform, same output columns), the three interleaved per repetition so that drift of
the machine spreads over all of them. Prints each repetition's time ratios (Protobuf / Avro, Protobuf
/ JSON) and the 1-minute load average before each job, and writes its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from rich.console import Console

from offsetbatch.paths import local_dir
from offsetbatch_dev import PROJECT_ROOT
from offsetbatch_dev.bench import avro_dataset, protobuf_dataset, quiet, report, throughput
from offsetbatch_dev.bench.dataset import ensure_dataset
from offsetbatch_dev.stack.kafka_broker import KafkaBroker

KINDS = ("json", "avro", "protobuf")
GOAL = 1.3  # the Protobuf job's time at most this many times the Avro job's


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetbatch_dev.bench.formats", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--allow-load", action="store_true", help="measure even if the machine is busy (the report says so)")
    parser.add_argument("--docs", default=str(PROJECT_ROOT / "docs"))
    args = parser.parse_args(argv)
    console = Console()
    warning = quiet.check_start(console, args.allow_load)
    command = report.command_line("offsetbatch_dev.bench.formats", argv)
    work = local_dir() / "bench"
    work.mkdir(parents=True, exist_ok=True)
    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    broker.start()
    n, p = args.records, args.partitions
    datasets = {"json": ensure_dataset(broker.bootstrap, f"bench-{n}-{p}", n, p)}
    with avro_dataset.registry() as registry:  # serves only while the schemas are resolved
        datasets["avro"], avro_id = avro_dataset.ensure_avro_dataset(broker.bootstrap, registry, n, p)
        datasets["protobuf"], pb_id = protobuf_dataset.ensure_protobuf_dataset(broker.bootstrap, registry, n, p)
        schemas = {"json": None,
                   "avro": avro_dataset.value_schemas(datasets["avro"], registry, throughput.REQUIRED, work),
                   "protobuf": protobuf_dataset.value_schemas(datasets["protobuf"], registry, throughput.REQUIRED, work)}
    formats = {"json": "json", "avro": "confluent-avro", "protobuf": "confluent-protobuf"}
    conf = throughput.spark_conf(args.driver_memory)
    samples: dict[str, list[throughput.Sample]] = {k: [] for k in KINDS}
    loads: list[float] = []
    for rep in range(args.repeat):
        for kind in KINDS:
            what = f"run {rep + 1}/{args.repeat}, {kind} job"
            busy = quiet.busy_before_run(console, what)
            loads.append(os.getloadavg()[0])
            s = throughput.batch_job(datasets[kind], broker.bootstrap, conf, work, rep, name=f"job-{kind}",
                                     value_schemas=schemas[kind], value_format=formats[kind])
            s.busy = busy
            if s.records != n or s.rejected:
                raise RuntimeError(f"{kind}: the job read {s.records} records and rejected {s.rejected}, expected {n} and 0")
            samples[kind].append(s)
            console.log(f"{what}: {s.seconds:.1f}s in app, {s.wall:.1f}s wall, {n / s.seconds:,.0f} records/s, "
                        f"load {loads[-1]:.2f}")
        pb, av, js = (samples[k][-1].seconds for k in ("protobuf", "avro", "json"))
        console.print(f"repetition {rep + 1}: protobuf / avro {pb / av:.2f}, protobuf / json {pb / js:.2f}, "
                      f"avro / json {av / js:.2f}")
    lines = section(datasets, samples, loads, command, warning, avro_id, pb_id)
    report.write_section(Path(args.docs) / "benchmarks.md", "bench-formats", lines)
    console.print("\n".join(lines))
    return 0


def section(datasets, samples, loads, command, warning, avro_id, pb_id) -> list[str]:
    med = {k: statistics.median(s.seconds for s in samples[k]) for k in KINDS}
    reps = len(samples["json"])
    lines = ["## Value formats: the job on JSON, Avro and Protobuf", "",
             f"{report.stamp(command)}. The same {datasets['json'].records:,} events (`dataset.event`, seeded alike) as "
             f"JSON (`json`, the pipeline's DDL), as Confluent prefix-framed Avro (`confluent-avro`, writer schema id "
             f"{avro_id}) and as Confluent prefix-framed Protobuf (`confluent-protobuf`, schema id {pb_id}, message "
             f"indexes `[0]`; `offsetbatch_dev.bench.protobuf_dataset`), schemas resolved from the stand-in registry as "
             f"the plan task does; each job submitted as the spark_job task submits it, with the same Spark settings, "
             f"transform and output. {reps} repetitions, the three jobs interleaved. \"in app\": seconds after the Spark "
             f"session is up. Median (min–max). 1-minute load average before the jobs: "
             f"{min(loads):.2f}–{max(loads):.2f} (2 cores).", ""]
    if warning:
        lines += [f"**Measured on a machine that was not quiet:** {warning}.", ""]
    lines += ["| format | data MiB | in app s | wall s | records/s (in app) | peak driver RSS MiB | busy before (max %) |",
              "| --- | ---: | --- | --- | ---: | ---: | ---: |"]
    for k in KINDS:
        s, ds = samples[k], datasets[k]
        rss = [x.peak_rss_mb for x in s if x.peak_rss_mb]
        lines.append(f"| {k} | {ds.bytes / 2**20:.0f} | {_spread([x.seconds for x in s])} | {_spread([x.wall for x in s])} | "
                     f"{ds.records / med[k]:,.0f} | {f'{max(rss):,.0f}' if rss else 'n/a'} | {max(x.busy for x in s):.0f} |")
    runs = {pair: [a.seconds / b.seconds for a, b in zip(samples[pair[0]], samples[pair[1]])]
            for pair in (("protobuf", "avro"), ("protobuf", "json"), ("avro", "json"))}
    lines += ["", "| time ratio | medians | per repetition | goal | met |", "| --- | ---: | --- | --- | --- |"]
    for (a, b), xs in runs.items():
        r = med[a] / med[b]
        goal = (a, b) == ("protobuf", "avro")
        lines.append(f"| {a} / {b} | {'**' if goal else ''}{r:.2f}{'**' if goal else ''} | "
                     f"{', '.join(f'{x:.2f}' for x in xs)} | {f'≤ {GOAL}' if goal else '(reference)'} | "
                     f"{('yes' if r <= GOAL else 'no') if goal else ''} |")
    return lines + [""]


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}–{max(xs):.1f})"


if __name__ == "__main__":
    sys.exit(main())
