"""The batch job over SASL_SSL (SCRAM-SHA-512, TLS) against PLAINTEXT, on the same records.

    python -m offsetbatch_dev.bench.secure_kafka [--records 1000000] [--partitions 4] [--repeat 3]

Starts the local plaintext broker and a secured one (``offsetbatch-stack kafka start --secure``'s
setup, on KAFKA_PORT + 100), produces the same data set to both (same seed), then runs the batch
job on each, interleaved, ``--repeat`` times, exactly as the spark_job task submits it (options in
the job spec, the SASL login in a private file). Prints the medians and the ratio and writes them
into ``docs/benchmarks.md`` between the ``secure-kafka`` markers.
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
from offsetbatch.source.connection import from_settings
from offsetbatch_dev.bench import report, throughput
from offsetbatch_dev.bench.dataset import ensure_dataset
from offsetbatch_dev.stack.kafka_broker import KafkaBroker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetbatch_dev.bench.secure_kafka", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--docs", default=str(PROJECT_ROOT / "docs"))
    args = parser.parse_args(argv)
    console = Console()
    work = local_dir() / "bench-secure"
    work.mkdir(parents=True, exist_ok=True)
    port = int(os.environ.get("KAFKA_PORT", "9092"))
    plain = KafkaBroker(port=port)
    secure = KafkaBroker(port=port + 100, home=local_dir() / "kafka-secure", security="sasl_ssl")
    plain.start()
    secure.start()
    client = from_settings("bench_secure", secure.connection_extra("admin"))
    topic = f"bench-secure-{args.records}-{args.partitions}"
    ds = ensure_dataset(plain.bootstrap, topic, args.records, args.partitions)
    ensure_dataset(secure.bootstrap, topic, args.records, args.partitions, client=client)
    conf = throughput.spark_conf(args.driver_memory)
    samples: dict[str, list[throughput.Sample]] = {"plaintext": [], "sasl_ssl": []}
    for rep in range(args.repeat):
        for name in samples:
            sample = (throughput.batch_job(ds, plain.bootstrap, conf, work, rep, name="plain") if name == "plaintext"
                      else throughput.batch_job(ds, secure.bootstrap, conf, work, rep, client=client, name="secure"))
            samples[name].append(sample)
            console.print(f"run {rep + 1}/{args.repeat} {name}: {sample.records:,} records in {sample.seconds:.1f} s "
                          f"({sample.records / sample.seconds:,.0f} records/s)")
    med = {k: statistics.median(s.records / s.seconds for s in v) for k, v in samples.items()}
    ratio = med["sasl_ssl"] / med["plaintext"]
    table = Table(title=f"batch job, {args.records:,} JSON records over {args.partitions} partitions")
    for col in ("broker", "median records/s", "runs (s)"):
        table.add_column(col)
    for k, v in samples.items():
        table.add_row(k, f"{med[k]:,.0f}", ", ".join(f"{s.seconds:.1f}" for s in v))
    console.print(table)
    console.print(f"SASL_SSL / PLAINTEXT throughput: {ratio:.2f}")
    doc = Path(args.docs) / "benchmarks.md"
    report.write_section(doc, "secure-kafka", [
        "## Kafka over SASL_SSL",
        "",
        f"`python -m offsetbatch_dev.bench.secure_kafka --records {args.records} --partitions {args.partitions} "
        f"--repeat {args.repeat}`, {time.strftime('%Y-%m-%d')}: the batch job on the same {args.records:,} records "
        f"from a PLAINTEXT broker and from a SASL_SSL one (SCRAM-SHA-512, TLS 1.3, hostname verified), "
        f"interleaved, medians of {args.repeat}.",
        "",
        "| broker | records/s (median) | job seconds per run |",
        "| --- | ---: | --- |",
        *[f"| {k} | {med[k]:,.0f} | {', '.join(f'{s.seconds:.1f}' for s in v)} |" for k, v in samples.items()],
        "",
        f"**SASL_SSL / PLAINTEXT: {ratio:.2f}×** (TLS encryption of every fetch; SCRAM costs one handshake per "
        f"connection).",
    ])
    console.print(f"written to {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
