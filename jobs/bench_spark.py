"""Benchmark Spark applications (``make bench`` submits them; not part of a pipeline):

    raw   read the job spec's ranges with Spark's Kafka source and only count them: the practical
          limit of the machine for Spark reading Kafka
    peer  the obvious alternative to offsetbatch: Structured Streaming from the same position with
          the same parse and transform, a Parquet sink with a checkpoint, Trigger.AvailableNow

Both print one line ``BENCH {json}`` with the seconds spent inside the application (after the
Spark session is up), so they compare with the batch job's own ``job_seconds``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from offsetbatch.formats import ERROR, FORMATS
from offsetbatch.jobspec import JobSpec
from offsetbatch_job import read_ranges, transform, with_metadata


def raw(spark: SparkSession, spec: JobSpec) -> dict:
    t0 = time.monotonic()
    n = read_ranges(spark, spec).count()
    return {"records": n, "seconds": time.monotonic() - t0}


def peer(spark: SparkSession, spec: JobSpec, out: str, checkpoint: str) -> dict:
    t0 = time.monotonic()
    starting = {}
    for r in spec.offset_ranges:
        starting.setdefault(r.topic, {})[str(r.partition)] = r.from_offset
    stream = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", spec.bootstrap)
              .option("subscribe", ",".join(sorted(starting)))
              .option("startingOffsets", json.dumps(starting))
              .option("failOnDataLoss", "true")
              .option("includeHeaders", "true")
              .load())
    parsed = FORMATS[spec.value_format].parse(with_metadata(stream), spec)
    good = parsed.where(F.col(ERROR).isNull()).drop(ERROR, "value")
    out_df = transform(spark, good, spec).withColumn("event_date", F.to_date(F.col(spec.sink["event_time_column"])))
    query = (out_df.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
             .partitionBy("event_date").trigger(availableNow=True).start())
    query.awaitTermination()
    progress = query.recentProgress
    rows = sum(p["numInputRows"] for p in progress)
    return {"records": rows, "seconds": time.monotonic() - t0, "micro_batches": len(progress)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="offsetbatch benchmark applications")
    parser.add_argument("mode", choices=["raw", "peer"])
    parser.add_argument("--spec", required=True)
    parser.add_argument("--out")
    parser.add_argument("--checkpoint")
    args = parser.parse_args(argv)
    spec = JobSpec.load(args.spec)
    spark = SparkSession.builder.appName(f"offsetbatch-bench-{args.mode}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        result = raw(spark, spec) if args.mode == "raw" else peer(spark, spec, args.out, args.checkpoint)
    finally:
        spark.stop()
    print("BENCH " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
