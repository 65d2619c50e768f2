"""The small local job whose driver JVM writes the suite's class-data-sharing archive
(``conftest.spark_class_archive``): it loads what every batch job's driver loads first (Spark SQL,
a shuffle, a Parquet write), so the archive holds those classes, parsed and verified once.

    spark-submit --conf spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit=A spark_class_archive.py OUT
"""

import sys

from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
df = spark.range(10_000).selectExpr("id", "CAST(id AS STRING) AS v", "id % 7 AS k")
df.groupBy("k").count().collect()
df.write.mode("overwrite").parquet(sys.argv[1])
spark.stop()
