"""Peer 1: a Structured Streaming query from the Kafka source to a partitioned Parquet sink with a
checkpoint, run once over what is there (``Trigger.AvailableNow``), as the Structured Streaming +
Kafka integration guide shows. Prints ``BENCH {json}``: seconds after the session is up."""

from __future__ import annotations

import json
import time

from common import arguments, parse
from pyspark.sql import SparkSession


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    spark = SparkSession.builder.appName("peer-structured-streaming").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    t0 = time.monotonic()
    stream = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.topic)
              .option("startingOffsets", args.starting)
              .load())
    query = (parse(stream, args).writeStream.format("parquet")
             .option("path", args.out).option("checkpointLocation", args.checkpoint)
             .partitionBy("event_date").trigger(availableNow=True).start())
    query.awaitTermination()
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    seconds = time.monotonic() - t0
    spark.stop()
    print("BENCH " + json.dumps({"records": rows, "seconds": seconds}), flush=True)


if __name__ == "__main__":
    main()
