"""The kafka sink's commit on a large batch: records/s published in one Kafka transaction, against
kafka-python's plain producer on the same records.

    python -m offsetbatch_dev.bench.kafka_publish [--records 1000000] [--repeat 3]

Stages ``--records`` rows as the Spark job would (``_key``, a ~160 B JSON ``_value``, the source
coordinates) in Parquet, then, against the local broker, per repetition (interleaved):

* **sink**: exactly the commit's publication (``KafkaSink.publish`` on confluent-kafka/librdkafka:
  read and sort the staged rows, one transaction, 4 headers per record, the marker) to a fresh
  topic, in a process of its own so that its peak RSS is the publish's;
* **kafka-python**: kafka-python's ``KafkaProducer`` (idempotent, the same batch/linger/compression
  settings, no transaction, no headers) sending the same keys and values: what the sink's previous
  publisher (kafka-python, 0.99× this producer in the last run that had it) could at best do.

Reports medians, the ratio, the sink's time split (read+sort, send loop, flush+commit) and its
peak RSS, and writes them into ``docs/benchmarks.md`` between the ``kafka-publish`` markers.
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

from offsetbatch.paths import local_dir

from offsetbatch_dev import PROJECT_ROOT

PARTITIONS = 8


def stage(root: Path, records: int, chunk: int = 250_000) -> None:
    """Staged rows of one batch (attempt 'a' of batch 1) and their manifest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from offsetbatch.jobspec import Manifest
    from offsetbatch.sinks.staging import StagingLayout

    layout = StagingLayout(str(root))
    data = Path(layout.staging_data(1, "a"))
    data.mkdir(parents=True, exist_ok=True)
    Path(layout.staging_rejected(1, "a")).mkdir(parents=True, exist_ok=True)
    files = []
    for i, start in enumerate(range(0, records, chunk)):
        n = min(chunk, records - start)
        values = [json.dumps({"event_id": f"{j:012d}-4b1c-9f0e-1a2b3c4d5e6f", "kind": "purchase", "user_id": j % 50_000,
                              "page": f"/product/{j % 997}", "event_time": "2026-11-23T01:02:03.456Z",
                              "amount": round(j * 0.37 % 500, 2)}, separators=(",", ":")) for j in range(start, start + n)]
        table = pa.table({"_key": [str(j % 50_000) for j in range(start, start + n)], "_value": values,
                          "kafka_topic": ["bench-source"] * n,
                          "kafka_partition": pa.array([j % PARTITIONS for j in range(start, start + n)], pa.int32()),
                          "kafka_offset": pa.array([j // PARTITIONS for j in range(start, start + n)], pa.int64())})
        path = data / f"part-{i:05d}.parquet"
        pq.write_table(table, path)
        files.append(str(path))
    Manifest(pipeline="bench_kafka", output_id=1, ranges=[], rows_in=records, rows_out=records, rows_rejected=0,
             bytes_in=0, data_files=files, rejected_files=[], job_seconds=0, spark_version="none",
             attempt="a").save(layout.staging_manifest(1, "a"))


def _topic(bootstrap: str, name: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        if name in admin.list_topics():
            admin.delete_topics([name])
            time.sleep(2)  # topic deletion is asynchronous on the broker
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    finally:
        admin.close()


def sink_publish(work: Path, staged: Path, bootstrap: str, rep: int) -> dict:
    """``KafkaSink.publish`` of the staged batch (a copy: publishing removes staging), in a child
    process: its peak RSS is the commit task's for this publish."""
    import multiprocessing

    topic = f"bench-kafka-sink-{rep}"
    _topic(bootstrap, topic)
    root = work / f"sink-{rep}"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(staged, root)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        result = pool.apply(_publish_in_child, (str(root), bootstrap, topic))
    shutil.rmtree(root, ignore_errors=True)
    return result


def _publish_in_child(root: str, bootstrap: str, topic: str) -> dict:
    import resource

    from offsetbatch.sinks import sink_for

    os.environ["AIRFLOW_CONN_BENCH_KAFKA"] = json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}})
    sink = sink_for("bench_kafka", {"type": "kafka", "path": root, "topic": topic, "conn_id": "bench_kafka",
                                    "key": ["user_id"], "partitioning": "source"})
    t0 = time.perf_counter()
    sink.publish(1, 1, "a", kind="incremental")
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "timings": dict(sink.timings),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def plain_producer(staged: Path, bootstrap: str, rep: int, producer_kwargs: dict) -> dict:
    from kafka import KafkaProducer

    topic = f"bench-kafka-plain-{rep}"
    _topic(bootstrap, topic)
    table = _read_all(staged)
    keys = [k.encode() for k in table.column("_key").to_pylist()]
    values = [v.encode() for v in table.column("_value").to_pylist()]
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, **producer_kwargs)
    t0 = time.perf_counter()
    for k, v in zip(keys, values):
        producer.send(topic, value=v, key=k)
    producer.flush()
    seconds = time.perf_counter() - t0
    producer.close()
    return {"seconds": seconds}


def _confluent_version() -> str:
    import confluent_kafka

    return f"{confluent_kafka.version()}, librdkafka {confluent_kafka.libversion()[0]}"


def _seconds(runs: list[dict]) -> str:
    return ", ".join(f"{r['seconds']:.1f}" for r in runs)


def _read_all(staged: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pa.concat_tables([pq.read_table(p, columns=["_key", "_value"]) for p in sorted(staged.rglob("part-*.parquet"))])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetbatch_dev.bench.kafka_publish", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--docs", default=str(PROJECT_ROOT / "docs"))
    args = parser.parse_args(argv)
    console = Console()
    from offsetbatch.sinks.kafka.settings import KafkaSinkSettings
    from offsetbatch_dev.bench import report
    from offsetbatch_dev.stack.kafka_broker import KafkaBroker

    work = local_dir() / "bench-kafka"
    shutil.rmtree(work, ignore_errors=True)
    staged = work / "staged"
    stage(staged, args.records)
    size = sum(len(v) for v in _read_all(staged).column("_value").to_pylist()) / args.records
    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    broker.start()
    conf = KafkaSinkSettings(path="/x", topic="x").producer_config()
    kwargs = {"batch_size": conf["batch.size"], "linger_ms": conf["linger.ms"],
              "compression_type": conf["compression.type"], "max_request_size": conf["message.max.bytes"]}
    runs: dict[str, list[dict]] = {"sink": [], "plain": []}
    for rep in range(args.repeat):
        runs["sink"].append(sink_publish(work, staged, broker.bootstrap, rep))
        runs["plain"].append(plain_producer(staged, broker.bootstrap, rep, kwargs))
        console.print(f"run {rep + 1}/{args.repeat}: sink {runs['sink'][-1]['seconds']:.1f}s "
                      f"({runs['sink'][-1]['timings']}, {runs['sink'][-1]['peak_rss_mib']:,.0f} MiB), kafka-python {runs['plain'][-1]['seconds']:.1f}s")
    rate = {k: statistics.median(args.records / r["seconds"] for r in v) for k, v in runs.items()}
    split = {k: statistics.median(r["timings"][k] for r in runs["sink"]) for k in runs["sink"][0]["timings"]}
    rss = [r["peak_rss_mib"] for r in runs["sink"]]
    ratio = rate["sink"] / rate["plain"]
    met = rate["sink"] >= 80_000 and ratio >= 4
    console.print(f"sink {rate['sink']:,.0f} records/s, kafka-python {rate['plain']:,.0f} records/s, ratio {ratio:.2f}; "
                  f"sink split {split}; peak RSS {max(rss):,.0f} MiB")
    report.write_section(Path(args.docs) / "benchmarks.md", "kafka-publish", [
        "## Kafka sink: the commit's transaction",
        "",
        f"`python -m offsetbatch_dev.bench.kafka_publish --records {args.records} --repeat {args.repeat}`, "
        f"{time.strftime('%Y-%m-%d')}, medians of {args.repeat}, interleaved, local broker: {args.records:,} staged "
        f"records (JSON values of {size:.0f} B, keys, {PARTITIONS} source partitions) published by `KafkaSink.publish` "
        f"(confluent-kafka {_confluent_version()}: read and sort, one transaction, 4 headers per record, the marker; "
        f"each run in a process of its own) and by kafka-python's plain idempotent producer (no transaction, no "
        f"headers) with the same batch/linger/compression settings.",
        "",
        "| publisher | records/s (median) | seconds per run |",
        "| --- | ---: | --- |",
        *[f"| {'KafkaSink.publish (confluent-kafka)' if k == 'sink' else 'plain KafkaProducer (kafka-python)'} | "
          f"{rate[k]:,.0f} | {_seconds(v)} |" for k, v in runs.items()],
        "",
        f"**Sink / kafka-python: {ratio:.2f}×.** Time of the sink's publish (median s): "
        + ", ".join(f"{k} {v:.1f}" for k, v in split.items())
        + f". Peak RSS of the publishing process: {', '.join(f'{r:,.0f}' for r in rss)} MiB (the staged table "
        f"read whole, plus one chunk of 65,536 rows as Python objects at a time). Target (issue 29: at least 80,000 records/s and 4× kafka-python): "
        f"{'met' if met else 'missed'}. The previous publisher, kafka-python's transactional producer, ran at 0.99× "
        f"the plain kafka-python producer (11,451 vs 11,540 records/s, 2026-11-23): its `send()` encodes every record "
        f"and header in Python.",
    ])
    console.print(f"written to {Path(args.docs) / 'benchmarks.md'}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
