"""The benchmark's results as Markdown tables and a PNG chart in docs/, with the machine, the
versions and the command that produced them."""

from __future__ import annotations

import os
import platform
import re
import statistics
from datetime import datetime, timezone
from pathlib import Path

from offsetbatch_dev.bench.dataset import Dataset
from offsetbatch_dev.bench.ledger_cost import Cost
from offsetbatch_dev.bench.throughput import Sample

MEASURES = {"raw": "raw read (count only)", "job": "our batch job",
            "peer": "peer: Structured Streaming AvailableNow (as documented, no project code)",
            "peer_gc": "peer: Structured Streaming AvailableNow, its driver on the parallel GC (no project code)",
            "batch_peer": "peer: hand-written `spark.read` batch (no project code)",
            "json_floor": "floor: `spark.read`, `from_json`, partitioned write; no checks, the job's Spark settings",
            "avro_peer": "peer: Structured Streaming AvailableNow, prefix stripped, `from_avro` (no project code)",
            "avro_floor": "floor: `spark.read`, prefix stripped, `from_avro`, partitioned write; no checks, the job's Spark settings",
            "job_no_text_checks": "our batch job without its UTF-8 checks of decoded strings",
            "dag": "our whole DAG run (plan + spark-submit + commit)",
            "dag_connect": "our whole DAG run on a Spark Connect server (plan + job + commit)"}


def median(samples: list[Sample], attr: str = "seconds") -> float:
    return statistics.median(getattr(s, attr) for s in samples)


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal"))) / 2**20
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, {platform.system()} {platform.release()}"


def versions() -> str:
    from importlib.metadata import version

    from offsetbatch_dev.stack.artifacts import KAFKA_VERSION

    return (f"Python {platform.python_version()}, PySpark {version('pyspark')}, apache-airflow {version('apache-airflow')}, "
            f"kafka-python {version('kafka-python')}, Kafka broker {KAFKA_VERSION}, SQLAlchemy {version('SQLAlchemy')}")


def fixed_cost(dag_stats: list[dict]) -> float:
    """A DAG run's seconds outside its Spark job: its three tasks, from each one's start in the
    execution API to its end (``throughput.task_seconds``), minus the job's own seconds."""
    return statistics.median(sum(d["task_seconds"].values()) - d["job_seconds"] for d in dag_stats)


THROUGHPUT = ("raw", "job", "peer", "peer_gc", "batch_peer", "json_floor")
PEERS = {"peer": "Structured Streaming peer", "peer_gc": "Structured Streaming peer, parallel GC",
         "batch_peer": "spark.read peer"}
TARGET = 1.2  # job / each peer, at every size (issue 32; the parallel-GC peer: issue 57)
FLOOR_TARGET = 0.95  # job / the no-check floor: what the checks may cost (issue 57)
RSS_LIMIT_MB = 1536  # the job's driver peak RSS at 5,000,000 records
# What the job is compared with (key: label, target ratio or None for a reference), per phase.
COMPARED = {"raw": ("raw read", None), **{k: (label, TARGET) for k, label in PEERS.items()},
            "json_floor": ("no-check floor (parse and write only)", FLOOR_TARGET)}
AVRO = ("raw", "job", "job_no_text_checks", "avro_peer", "avro_floor")  # the two jobs side by side
AVRO_COMPARED = {"raw": ("raw read", 0.5), "avro_peer": ("Structured Streaming + from_avro peer", 1.2),  # issue 31
                 "avro_floor": ("floor (decode and write only)", None),
                 "job_no_text_checks": ("the job without its UTF-8 checks (their cost)", 0.95)}  # issue 41


def ratio_runs(samples: dict[str, list[Sample]], peer: str) -> list[float]:
    """peer / job seconds of each repetition (the two ran next to each other)."""
    return [p.seconds / j.seconds for p, j in zip(samples[peer], samples["job"])]


def ratios(samples: dict[str, list[Sample]], compared: dict[str, tuple[str, float | None]] = COMPARED) -> dict[str, float]:
    """Throughput ratios of one size's medians, by compared key (a ratio > 1: the job is faster)."""
    job = median(samples["job"])
    return {k: median(samples[k]) / job for k in compared}


def _spread(xs: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def command_line(module: str, argv: list[str] | None) -> str:
    """How a benchmark was started, for its section: ``python -m <module> <its arguments>``."""
    import sys

    return " ".join(["python -m", module, *(argv if argv is not None else sys.argv[1:])])


def stamp(command: str) -> str:
    return f"`{command}`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"


def throughput_section(datasets: dict[int, Dataset], samples: dict[int, dict[str, list[Sample]]], command: str,
                       warning: str | None) -> list[str]:
    """Per size: each measurement's median and spread, and the job's ratios to the peers per
    repetition, against the targets."""
    reps = len(next(iter(samples.values()))["job"])
    lines = [f"## Throughput: the job against the raw read and the two peers", "",
             f"{stamp(command)}. Each size: {reps} repetitions, the {len(THROUGHPUT)} applications interleaved (one `spark-submit` "
             f"each; \"in app\": seconds after the Spark session is up). Median (min–max).", ""]
    if warning:
        lines += [f"**Measured on a machine that was not quiet:** {warning}.", ""]
    lines += [*_measurements(datasets, samples, THROUGHPUT), "", *_ratio_table(datasets, samples, COMPARED)]
    largest = max(datasets)
    rss = max((x.peak_rss_mb or 0) for x in samples[largest]["job"])
    lines += ["", f"The job's driver peak RSS at {largest:,} records: **{rss:,.0f} MiB** (target ≤ {RSS_LIMIT_MB:,} MiB: "
              f"{'met' if rss <= RSS_LIMIT_MB else 'missed'}).", ""]
    return lines


def avro_section(datasets: dict[int, Dataset], samples: dict[int, dict[str, list[Sample]]], schema_id: int,
                 command: str, warning: str | None, keys: tuple[str, ...] = AVRO) -> list[str]:
    """The ``avro`` phase: the throughput section's tables for the raw read, the job and the Avro
    peer on the same events as Confluent-framed Avro, the ratios against issue 31's targets
    (``keys``: the measurements taken, when not all)."""
    reps = len(next(iter(samples.values()))["job"])
    title = ("## Avro: the job against the raw read and a Structured Streaming `from_avro` peer" if keys == AVRO else
             f"## Avro, {' and '.join(MEASURES[k] for k in keys)}")
    lines = [title, "",
             f"{stamp(command)}. The throughput data set's events as Confluent prefix-framed Avro (writer schema id "
             f"{schema_id} in the stand-in schema registry, `offsetbatch_dev.bench.avro_dataset`), read as "
             f"`confluent-avro` with `schema_id: prefix`, the job's `value_schemas` resolved from the registry as the "
             f"plan task does. The floor (`bench/peers/batch_read_avro.py`) is the least any Spark application does to land "
             f"these records as the same partitioned Parquet, with the job's Spark settings and none of its checks: the "
             f"job's ratio to it is what its checks cost. Each size: {reps} repetitions, the {len(keys)} applications "
             f"interleaved. Median (min–max).", ""]
    lines += [f"* Data: {ds.records:,} Avro records, {ds.bytes / 2**20:.0f} MiB of values (about "
              f"{ds.bytes / ds.records:.0f} B each), {ds.partitions} partitions of topic `{ds.topic}`."
              for _, ds in sorted(datasets.items())] + [""]
    if warning:
        lines += [f"**Measured on a machine that was not quiet:** {warning}.", ""]
    compared = {k: v for k, v in AVRO_COMPARED.items() if k in keys}
    return lines + [*_measurements(datasets, samples, keys), "", *_ratio_table(datasets, samples, compared), ""]


def _measurements(datasets: dict[int, Dataset], samples: dict[int, dict[str, list[Sample]]],
                  keys: tuple[str, ...]) -> list[str]:
    """Per size and measurement: in-app and wall seconds, rates, peak RSS, how busy the machine was."""
    lines = ["| records | measurement | in app s | wall s | records/s (in app) | MiB/s | peak driver RSS MiB | busy before (max %) |",
             "| ---: | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for n, ds in sorted(datasets.items()):
        for key in keys:
            s = samples[n][key]
            t = median(s)
            rss = [x.peak_rss_mb for x in s if x.peak_rss_mb]
            lines.append(f"| {n:,} | {MEASURES[key]} | {_spread([x.seconds for x in s])} | {_spread([x.wall for x in s])} | "
                         f"{ds.records / t:,.0f} | {ds.bytes / 2**20 / t:.1f} | "
                         f"{f'{max(rss):,.0f}' if rss else 'n/a'} | {max(x.busy for x in s):.0f} |")
    return lines


def _ratio_table(datasets: dict[int, Dataset], samples: dict[int, dict[str, list[Sample]]],
                 compared: dict[str, tuple[str, float | None]]) -> list[str]:
    """Per size, the job against each compared measurement: the medians' ratio, each repetition's,
    the target (None: a reference, no target) and whether it is met."""
    lines = ["| records | ratio (medians) | value | per repetition | target | met |", "| ---: | --- | ---: | --- | --- | --- |"]
    for n in sorted(datasets):
        r = ratios(samples[n], compared)
        for key, (label, target) in compared.items():
            runs = ", ".join(f"{x:.2f}" for x in ratio_runs(samples[n], key))
            lines.append(f"| {n:,} | job / {label} | {r[key]:.2f} | {runs} | (reference) | |" if target is None else
                         f"| {n:,} | job / {label} | **{r[key]:.2f}** | {runs} | ≥ {target} | "
                         f"{'yes' if r[key] >= target else 'no'} |")
    return lines


def dag_section(ds: Dataset, samples: dict[str, list[Sample]], dag_stats: dict[str, list[dict]], command: str) -> list[str]:
    lines = ["## Whole DAG runs", "",
             f"{stamp(command)}. {ds.records:,} records; \"in app\" is the wall time of `airflow dags test`, the CLI's "
             f"own start-up included.", "",
             "| measurement | wall s, median (min–max) | records/s | tasks minus the Spark job (s) | target |",
             "| --- | --- | ---: | ---: | --- |"]
    for key, target in (("dag", "≤ 6"), ("dag_connect", "≤ 3")):
        s = samples[key]
        lines.append(f"| {MEASURES[key]} | {_spread([x.wall for x in s])} | {ds.records / median(s, 'wall'):,.0f} | "
                     f"{fixed_cost(dag_stats[key]):.1f} | {target} |")
    lines += ["", "Per run, the tasks (plan, spark_job, commit) took, from each one's start to its end:", ""]
    for key, stats in dag_stats.items():
        lines += [f"* {MEASURES[key]}: " + "; ".join(
            ", ".join(f"{t} {v:.1f} s" for t, v in d["task_seconds"].items()) + f" (Spark job {d['job_seconds']:.1f} s)"
            for d in stats) + "."]
    return lines + [""]


def cost_section(costs: list[Cost], command: str) -> list[str]:
    lines = ["## Planning and commit cost vs partitions", "",
             f"{stamp(command)}. Planner: `plan_for_run` under the ledger lock, broker round trips included (first plan "
             "also pins new partitions; steady state asks earliest/latest/time cut). Commit: the ledger transaction of a "
             "batch with one range per partition (lock, compare-and-set per partition, range stats, COMMIT).", "",
             "| partitions | ledger | first plan ms | plan ms (steady) | commit ms |", "| ---: | --- | ---: | ---: | ---: |"]
    for n in sorted({c.partitions for c in costs}):
        for backend in ("sqlite", "postgresql"):
            rows = [c for c in costs if c.partitions == n and c.backend == backend]
            if rows:
                lines.append(f"| {n:,} | {backend} | {statistics.median(c.first_plan for c in rows) * 1000:.0f} | "
                             f"{statistics.median(c.plan for c in rows) * 1000:.0f} | "
                             f"{statistics.median(c.commit for c in rows) * 1000:.0f} |")
    return lines + [""]


def chart(datasets: dict[int, Dataset], samples: dict[int, dict[str, list[Sample]]], path: Path) -> None:
    """Records/s (median, in app) of the throughput phase's applications at each size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels = {"raw": "raw read", "job": "batch job", "peer": "peer: AvailableNow", "peer_gc": "peer: AvailableNow, parallel GC",
              "batch_peer": "peer: spark.read", "json_floor": "floor: parse and write"}
    colors = {"raw": "#999999", "job": "#2a7ab0", "peer": "#d98c1f", "peer_gc": "#b5651d", "batch_peer": "#e0b060",
              "json_floor": "#6aa84f"}
    sizes = sorted(datasets)
    width = 0.8 / len(THROUGHPUT)
    for i, key in enumerate(THROUGHPUT):
        rates = [datasets[n].records / median(samples[n][key]) / 1000 for n in sizes]
        xs = [j + (i - (len(THROUGHPUT) - 1) / 2) * width for j in range(len(sizes))]
        ax.bar(xs, rates, width, label=labels[key], color=colors[key])
        for x, r in zip(xs, rates):
            ax.text(x, r, f"{r:.0f}k", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(sizes)), [f"{n:,} records" for n in sizes])
    ax.set_ylabel("thousand records / s (median, in app)")
    ax.set_title("the batch job, the raw read, the peers and the no-check floor")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# Said in the report's header: why figures of two sections may not compare.
HOSTS = ("Sections measured at different times may come from different hosts of this machine kind, whose speed "
         "has differed by about 2× (the test suite took 43 min 28 s and 20 min 49 s on two hosts on 2026-11-27): "
         "compare figures within one section, where every ratio's baseline is measured in the same run.")


def document(sections: dict[str, list[str]], datasets: dict[int, Dataset], minutes: float, png: str | None) -> str:
    """The report: a header (machine, versions, data sets) and one marked section per phase run."""
    lines = ["# Benchmarks", "", f"Last `make bench` run: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
             f"{minutes:.1f} minutes. Each section below says when and how it was measured. " + HOSTS, "",
             f"* Machine: {machine()}", f"* Versions: {versions()}"]
    for n, ds in sorted(datasets.items()):
        lines.append(f"* Data: {ds.records:,} JSON records, {ds.bytes / 2**20:.0f} MiB of values (about "
                     f"{ds.bytes / ds.records:.0f} B each), {ds.partitions} partitions of topic `{ds.topic}` on the "
                     f"local broker; every measurement reads all of it.")
    lines += ["* Spark: `local[*]`, the same `--conf` for every measurement (see "
              "`offsetbatch_dev.bench.throughput.spark_conf`).", ""]
    if png:
        lines += [f"![throughput]({png})", ""]
    for name, body in sections.items():
        lines += [f"<!-- {name}:begin -->", *body, f"<!-- {name}:end -->", ""]
    return "\n".join(lines)


def write_section(doc: Path, name: str, lines: list[str]) -> None:
    """Put ``lines`` into ``doc`` between ``<!-- name:begin -->`` and ``<!-- name:end -->``
    (replacing an earlier run's section, or appended): standalone benchmarks keep their results
    next to ``make bench``'s."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    section = "\n".join([begin, *lines, end])
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    text = (re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: section, text, flags=re.S)
            if begin in text else text.rstrip() + "\n\n" + section + "\n")
    doc.write_text(text)


def with_sections_of(doc: Path, text: str) -> str:
    """``text`` (a new ``make bench`` report) followed by the sections that ``doc`` holds now and
    ``text`` does not (standalone benchmarks', and phases this run skipped), so that rewriting the
    report does not drop them."""
    old = doc.read_text() if doc.exists() else ""
    sections = [m.group(0) for m in re.finditer(r"<!-- ([\w-]+):begin -->.*?<!-- \1:end -->", old, flags=re.S)
                if f"<!-- {m.group(1)}:begin -->" not in text]
    return text.rstrip() + "".join("\n\n" + sec for sec in sections) + "\n" if sections else text

