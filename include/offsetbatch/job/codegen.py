"""Interpreted expressions for a small batch: compiling its generated code costs more than it saves.

Spark compiles Java for every operator and projection of a plan (whole-stage code generation) and
caches the classes per class loader. On a Spark Connect server each session has its own class loader
(Spark 4 isolates sessions' artifacts: ``spark.sql.artifact.isolation.*``, forced on by the server),
and the spark_job task opens a session per run, so every batch compiles its plan again: 13 classes,
0.2-0.4 s of a 10,000-record batch on a warm server (docs/performance.md). Evaluated row by row
instead, the whole batch took 0.3 s less. A large batch keeps the generated code, whose speed per
record is what it needs.

Interpreted, Spark's subexpression elimination costs more than it saves too: it keeps each shared
expression's value in a Guava cache that it clears for every row (``SubExprEvaluationRuntime``); a
JFR recording of a 10,000-record batch's tasks found 13 % of their samples there. The job's shared
expressions are cheap (a column's null test, a field of the parsed value); the one dear one, the
value's parse, stays in a projection of its own, which the optimizer does not merge into the ones
that use it. Off for the batch: the job 0.958 of its time per run, interleaved (docs/performance.md).

``spark.sql.codegen.factoryMode`` is an internal Spark setting (pinned pyspark 4.3.0): NO_CODEGEN
makes projections, predicates and orderings interpreted; ``spark.sql.codegen.wholeStage`` false
turns off the fused stages. All three are session settings, set for the batch and unset after it
(each step one request on Spark Connect: ``spark_session.get_settings``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from offsetbatch.spark_session import get_settings, set_settings, unset_settings

# Up to this many records a batch runs interpreted. Measured on a warm Connect server (2 cores, the
# job's seconds, medians of 7 runs): 10,000 records 1.31 s interpreted against 1.60 s compiled,
# 50,000 records 2.03 s against 2.46 s (docs/performance.md, "A small batch on Spark Connect").
SMALL_BATCH_RECORDS = 50_000
SPARK_DEFAULTS = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK",
                  "spark.sql.subexpressionElimination.enabled": "true"}
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN",
               "spark.sql.subexpressionElimination.enabled": "false"}


@contextmanager
def for_batch(spark: SparkSession, records: int) -> Iterator[bool]:
    """The session set to evaluate a batch of ``records`` interpreted if it is small; yields
    whether it is. A session whose settings differ from Spark's defaults (the pipeline's
    ``spark.conf`` chose) is left as it is."""
    if records > SMALL_BATCH_RECORDS:
        yield False
        return
    current = {key: (value or SPARK_DEFAULTS[key]).lower() for key, value in get_settings(spark, SPARK_DEFAULTS).items()}
    if current != {key: value.lower() for key, value in SPARK_DEFAULTS.items()}:
        yield False
        return
    set_settings(spark, INTERPRETED)
    try:
        yield True
    finally:
        unset_settings(spark, INTERPRETED)
