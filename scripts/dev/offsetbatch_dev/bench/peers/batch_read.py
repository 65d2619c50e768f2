"""Peer 2: the same as a hand-written batch job: ``spark.read`` of the Kafka source between
``startingOffsets`` and ``endingOffsets``, the same parse, ``write.partitionBy(...).parquet``.
Prints ``BENCH {json}``: seconds after the session is up."""

from __future__ import annotations

import json
import time

from common import arguments, parse
from pyspark.sql import SparkSession


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    spark = SparkSession.builder.appName("peer-batch-read").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    t0 = time.monotonic()
    kafka = (spark.read.format("kafka")
             .option("kafka.bootstrap.servers", args.bootstrap)
             .option("subscribe", args.topic)
             .option("startingOffsets", args.starting)
             .option("endingOffsets", args.ending)
             .load())
    parse(kafka, args).write.partitionBy("event_date").parquet(args.out)
    seconds = time.monotonic() - t0
    rows = sum(int(json.loads(args.ending)[args.topic][p]) - int(v)
               for p, v in json.loads(args.starting)[args.topic].items())
    spark.stop()
    print("BENCH " + json.dumps({"records": rows, "seconds": seconds}), flush=True)


if __name__ == "__main__":
    main()
