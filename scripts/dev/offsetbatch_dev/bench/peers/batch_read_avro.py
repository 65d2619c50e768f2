"""Floor: the least a Spark application does to land the Avro records as partitioned Parquet: a
``spark.read`` of the Kafka source between ``startingOffsets`` and ``endingOffsets``, the 5-byte
prefix stripped, ``from_avro``, ``write.partitionBy(...).parquet``. No framing check, no record
rejected, no count kept (``make bench`` passes no ``--required``, so nothing is filtered either) and
submitted with the Spark settings the job ships: how close the job's checks let it come to what
Spark can do on the machine. Needs the spark-avro jar on ``--jars``. Prints ``BENCH {json}``:
seconds after the session is up."""

from __future__ import annotations

import json
import time

from common import arguments, parse_avro
from pyspark.sql import SparkSession


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    spark = SparkSession.builder.appName("floor-batch-read-avro").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    t0 = time.monotonic()
    kafka = (spark.read.format("kafka")
             .option("kafka.bootstrap.servers", args.bootstrap)
             .option("subscribe", args.topic)
             .option("startingOffsets", args.starting)
             .option("endingOffsets", args.ending)
             .load())
    parse_avro(kafka, args).write.partitionBy("event_date").parquet(args.out)
    seconds = time.monotonic() - t0
    rows = sum(int(json.loads(args.ending)[args.topic][p]) - int(v)
               for p, v in json.loads(args.starting)[args.topic].items())
    spark.stop()
    print("BENCH " + json.dumps({"records": rows, "seconds": seconds}), flush=True)


if __name__ == "__main__":
    main()
