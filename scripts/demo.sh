#!/usr/bin/env bash
# README command (a): start the local broker, produce sample events, read them back with Spark.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
offsetbatch-stack kafka start
python - <<'PY'
import json, time
from offsetbatch.devstack.artifacts import spark_connector_jars
from offsetbatch.sample.producer import produce
topic = f"demo-smoke-{int(time.time())}"
r = produce("127.0.0.1:" + __import__("os").environ["KAFKA_PORT"], topic, 20_000, partitions=4, hours=3)
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[*]").appName("demo-smoke")
         .config("spark.jars", ",".join(spark_connector_jars())).config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
df = (spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:" + __import__("os").environ["KAFKA_PORT"])
      .option("subscribe", topic).option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
n = df.count()
print(f"demo: produced {r.total} records to {topic}; Spark read back {n}: {'OK' if n == r.total else 'MISMATCH'}")
spark.stop()
raise SystemExit(0 if n == r.total else 1)
PY
