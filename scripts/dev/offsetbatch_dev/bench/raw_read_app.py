"""Benchmark Spark application (``make bench`` submits it by path; not part of a pipeline):

    raw   read the job spec's ranges with the job's own Kafka read and only count them: the
          practical limit of the machine for Spark reading Kafka

It prints one line ``BENCH {json}`` with the seconds spent inside the application (after the Spark
session is up), so it compares with the batch job's own ``job_seconds``. The peers (what a user
would write instead) are in ``peers/`` beside this file and import nothing of the project.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from pyspark.sql import SparkSession

from offsetbatch.job.read import read_ranges
from offsetbatch.jobspec import JobSpec


def raw(spark: SparkSession, spec: JobSpec) -> dict:
    t0 = time.monotonic()
    n = read_ranges(spark, spec).count()
    return {"records": n, "seconds": time.monotonic() - t0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="offsetbatch benchmark applications")
    parser.add_argument("mode", choices=["raw"])
    parser.add_argument("--spec", required=True)
    args = parser.parse_args(argv)
    spec = JobSpec.load(args.spec)
    spark = SparkSession.builder.appName(f"offsetbatch-bench-{args.mode}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        result = raw(spark, spec)
    finally:
        spark.stop()
    print("BENCH " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
