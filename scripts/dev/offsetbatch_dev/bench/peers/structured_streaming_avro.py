"""Peer 3: peer 1 on Confluent-framed Avro values, as a user writes it with Spark's own Avro
functions: a Structured Streaming query from the Kafka source, the 5-byte prefix stripped with
``substring(value, 6)``, ``from_avro`` with the writer schema given as an argument (no registry),
to a partitioned Parquet sink with a checkpoint, run once (``Trigger.AvailableNow``). Needs the
spark-avro jar on ``--jars``. Prints ``BENCH {json}``: seconds after the session is up."""

from __future__ import annotations

import json
import time

from common import arguments, parse_avro
from pyspark.sql import SparkSession


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    spark = SparkSession.builder.appName("peer-structured-streaming-avro").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    t0 = time.monotonic()
    stream = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.topic)
              .option("startingOffsets", args.starting)
              .load())
    query = (parse_avro(stream, args).writeStream.format("parquet")
             .option("path", args.out).option("checkpointLocation", args.checkpoint)
             .partitionBy("event_date").trigger(availableNow=True).start())
    query.awaitTermination()
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    seconds = time.monotonic() - t0
    spark.stop()
    print("BENCH " + json.dumps({"records": rows, "seconds": seconds}), flush=True)


if __name__ == "__main__":
    main()
