"""Where a Spark application's task threads spend their time: a Java Flight Recorder profile of
the batch job and of the peers over the same records, with each sampled stack put in one cost
category (Kafka fetch, JSON parse, sort, Parquet write, ...).

    python -m offsetbatch_dev.bench.jfr_profile --records 1000000 [--avro] [--write docs/performance.md]

``--avro``: the same events as Confluent-framed Avro (``avro_dataset``), the job decoding them as
``confluent-avro`` against the Structured Streaming peer that calls ``from_avro``.

JFR ships with the JDK (no agent to download). With the ``profile`` settings it samples every
thread running Java code every 10 ms (``jdk.ExecutionSample``) and every thread in native code
(a socket read waiting on the broker, snappy, a file write) every 20 ms (``jdk.NativeMethodSample``);
each sample counts for its period. Only Spark's task threads (``Executor task launch worker``) are
counted: the job's driver-side Python and the JVM's compiler and GC threads are not the task's
cost. A sample is put in the first category that a frame of its stack matches, leaf first, so a
Parquet page compressed by snappy counts as Parquet write, not as the generated code that called
the writer.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from offsetbatch.paths import local_dir
from offsetbatch.sinks.files import TableLayout
from offsetbatch_dev.bench import avro_dataset, report, throughput
from offsetbatch_dev.bench.dataset import ensure_dataset

# (category, substrings of "class.method"), matched leaf first; the first category hit wins.
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("observed metrics (Dataset.observe)", ("AggregatingAccumulator", "CollectMetricsExec", "HistogramNumeric",
                                            "NumericHistogram", "CollectList", "TypedImperativeAggregate")),
    ("UTF-8 validity scan", ("UTF8String.isValid", "UTF8String.makeValid", "UTF8String.validate")),
    ("timestamp parse", ("DateTimeUtils", "TimestampFormatter", "java.time.")),
    ("Avro decode (from_avro)", ("org.apache.avro", "AvroDataToCatalyst", "AvroDeserializer")),
    ("JSON parse (from_json, Jackson)", ("com.fasterxml.jackson", "JacksonParser", "JsonToStructs",
                                         "JsonExpressionUtils", "CreateJacksonParser")),
    ("sort before the partitioned write", ("UnsafeExternalSorter", "UnsafeInMemorySorter", "RadixSort",
                                           "UnsafeExternalRowSorter", "SortExec", "UnsafeSorterSpill")),
    ("Parquet write (encode, compress, file)", ("org.apache.parquet", "ParquetOutputWriter", "org.xerial.snappy",
                                                "com.github.luben.zstd", "FileFormatDataWriter", "org.apache.hadoop")),
    ("Kafka fetch and decode", ("org.apache.kafka", "KafkaDataConsumer", "InternalKafkaConsumer", "sun.nio",
                                "java.nio", "KafkaBatchPartitionReader", "KafkaSourceRDD")),
    ("Kafka record to row", ("KafkaRecordToRowConverter", "KafkaRecordToUnsafeRowConverter")),
    ("generated code (projections, filters)", ("GeneratedClass", "GeneratedIterator")),
]
OTHER = "other (row copies, iterators, JVM)"
TASK_THREAD = "Executor task launch worker"


def categorize(frames: list[str]) -> str:
    """The category of one stack (``frames`` leaf first, each ``class.method``)."""
    for frame in frames:
        for name, needles in CATEGORIES:
            if any(n in frame for n in needles):
                return name
    return OTHER


PERIOD_S = {"jdk.ExecutionSample": 0.010, "jdk.NativeMethodSample": 0.020}  # JFR's "profile" settings


GC_PAUSES = "JVM: garbage collection pauses (all threads stopped)"
JVM_CPU = "JVM: CPU of all its threads (tasks, JIT compiler, GC, driver)"


def _seconds(duration: str) -> float:
    """A JFR duration (ISO 8601, ``PT1M2.5S``) in seconds."""
    minutes, _, rest = duration.removeprefix("PT").rpartition("M")
    return (float(minutes) * 60 if minutes else 0.0) + float(rest.rstrip("S") or 0)


def samples_of(recording: Path) -> Counter:
    """Task-thread seconds per category of one JFR recording (``jfr print --json``), and the JVM's
    GC pauses and CPU (``jdk.CPULoad``, sampled each second, in core-seconds)."""
    events = ",".join([*PERIOD_S, "jdk.GarbageCollection", "jdk.CPULoad"])
    out = subprocess.run(["jfr", "print", "--json", "--stack-depth", "96", "--events", events, str(recording)],
                         capture_output=True, text=True, check=True).stdout
    seconds: Counter = Counter()
    for event in json.loads(out)["recording"]["events"]:
        values = event["values"]
        if event["type"] == "jdk.GarbageCollection":
            seconds[GC_PAUSES] += _seconds(values["sumOfPauses"])
            continue
        if event["type"] == "jdk.CPULoad":
            seconds[JVM_CPU] += (values["jvmUser"] + values["jvmSystem"]) * (os.cpu_count() or 1)
            continue
        thread = (values.get("sampledThread") or {}).get("javaName") or ""
        if not thread.startswith(TASK_THREAD):
            continue
        frames = [f"{f['method']['type']['name']}.{f['method']['name']}"
                  for f in (values.get("stackTrace") or {}).get("frames", [])]
        native = event["type"] == "jdk.NativeMethodSample"
        seconds[categorize(frames) + (" [native/waiting]" if native else "")] += PERIOD_S[event["type"]]
    return seconds


def jfr_conf(conf: dict[str, str], recording: Path) -> dict[str, str]:
    """``conf`` with a flight recording added to the driver's JVM options (kept)."""
    key = "spark.driver.extraJavaOptions"
    jfr = f"-XX:StartFlightRecording=filename={recording},settings=profile,dumponexit=true"
    return {**conf, key: f"{conf.get(key, '')} {jfr}".strip()}


def profile_job(ds, bootstrap: str, conf: dict, work: Path, name: str = "job",
                checkout: Path | None = None, value_schemas: dict | None = None) -> tuple[float, Counter]:
    """The job as the spark_job task submits it; ``checkout``: another checkout's version of it
    (its ``jobs/offsetbatch_job.py`` and ``include/``, with the conf that version shipped: none);
    ``value_schemas``: ``ds`` is the Avro data set."""
    table = work / name / "table"
    shutil.rmtree(table.parent, ignore_errors=True)
    spec = throughput.job_spec(ds, bootstrap, str(table), value_schemas)
    uri = TableLayout(str(table)).spec(1)
    spec.save(uri)
    recording = work / f"{name}.jfr"
    app = checkout / "jobs" / "offsetbatch_job.py" if checkout else throughput.JOB
    throughput.spark_submit(app, ["--spec", uri, "--attempt", "profile"],
                            jfr_conf(conf if checkout else throughput.product_conf(conf), recording),
                            work / f"{name}.log", pythonpath=str(checkout / "include") if checkout else None)
    from offsetbatch.jobspec import Manifest

    seconds = Manifest.load(TableLayout(str(table)).staging_manifest(1, "profile")).job_seconds
    shutil.rmtree(table.parent, ignore_errors=True)
    return seconds, samples_of(recording)


def profile_peer(kind: str, ds, bootstrap: str, conf: dict, work: Path, **schema) -> tuple[float, Counter]:
    recording = work / f"{kind}.jfr"
    sample = throughput.peer(kind, ds, bootstrap, jfr_conf(conf, recording), work, 0, **schema)
    return sample.seconds, samples_of(recording)


def table(profiles: dict[str, tuple[float, Counter]]) -> list[str]:
    """Markdown: per category, the task-thread seconds of each application (samples x period)."""
    names = list(profiles)
    cats = {c for p in profiles.values() for c in p[1]} - {GC_PAUSES, JVM_CPU}
    lines = ["| cost (task-thread seconds, JFR samples x period) | " + " | ".join(names) + " |",
             "| --- |" + " ---: |" * len(names)]
    for cat in sorted(cats, key=lambda c: -profiles[names[0]][1].get(c, 0)):
        lines.append(f"| {cat} | " + " | ".join(f"{p[1].get(cat, 0):.1f}" for p in profiles.values()) + " |")
    lines.append("| **all task threads** | " + " | ".join(
        f"**{sum(v for c, v in p[1].items() if c in cats):.1f}**" for p in profiles.values()) + " |")
    for extra in (GC_PAUSES, JVM_CPU):
        lines.append(f"| {extra} | " + " | ".join(f"{p[1].get(extra, 0):.1f}" for p in profiles.values()) + " |")
    lines.append("| in-app seconds (wall, this run) | " + " | ".join(f"{p[0]:.1f}" for p in profiles.values()) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetbatch_dev.bench.jfr_profile", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--avro", action="store_true", help="the events as Confluent-framed Avro, against the from_avro peer")
    parser.add_argument("--write", help="a Markdown file to put the table in (section 'profile-<records>')")
    parser.add_argument("--baseline", metavar="CHECKOUT", type=Path,
                        help="also profile the job of another checkout (e.g. `git worktree add /tmp/base HEAD~1`)")
    args = parser.parse_args(argv)
    from offsetbatch_dev.stack.kafka_broker import KafkaBroker

    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    broker.start()
    work = local_dir() / "bench" / "profile"
    work.mkdir(parents=True, exist_ok=True)
    schemas = None
    if args.avro:
        with avro_dataset.registry() as registry:
            ds, _ = avro_dataset.ensure_avro_dataset(broker.bootstrap, registry, args.records, args.partitions)
            schemas = avro_dataset.value_schemas(ds, registry, throughput.REQUIRED, work)
    else:
        ds = ensure_dataset(broker.bootstrap, f"bench-{args.records}-{args.partitions}", args.records, args.partitions)
    conf = throughput.spark_conf(args.driver_memory)
    profiles = {"batch job": profile_job(ds, broker.bootstrap, conf, work, value_schemas=schemas)}
    if args.baseline:
        rev = subprocess.run(["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip() or args.baseline.name
        profiles[f"batch job at {rev}"] = profile_job(ds, broker.bootstrap, conf, work, "baseline", args.baseline,
                                                      schemas)
    if schemas is not None:
        profiles["peer: Structured Streaming + from_avro"] = profile_peer(
            "structured_streaming_avro", ds, broker.bootstrap, conf, work, schema=schemas["reader"])
    else:
        profiles |= {
            "peer: Structured Streaming": profile_peer("structured_streaming", ds, broker.bootstrap, conf, work),
            "peer: spark.read": profile_peer("batch_read", ds, broker.bootstrap, conf, work),
            # the no-check floor of the throughput bench (issue 57): the job's Spark settings, nothing required
            "floor: parse and write only": profile_peer("batch_read", ds, broker.bootstrap, throughput.floor_conf(conf),
                                                        work, required=[])}
    lines = table(profiles)
    print("\n".join(lines))
    if args.write:
        report.write_section(Path(args.write), f"profile-{'avro-' if args.avro else ''}{args.records}", [
            f"`python -m offsetbatch_dev.bench.jfr_profile --records {args.records}{' --avro' if args.avro else ''}` ({ds.records:,} records, "
            f"{args.partitions} partitions, `local[*]` on {os.cpu_count()} cores, one run each):", "", *lines])
    return 0


if __name__ == "__main__":
    sys.exit(main())
