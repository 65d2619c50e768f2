"""What the Spark job learns about a batch while it writes it, in its one pass over Kafka.

A ``Dataset.observe`` on the parsed records collects, as the data write runs (no cache, no second
read of Kafka or of the written files):

* per planned range, the records read and rejected: ``histogram_numeric`` of the range's key. It is
  exact here: its bin limit (``BINS``) is far above the keys x Spark tasks it can ever hold, so no
  two bins are merged, and the bins one key has in several tasks' partial histograms are summed on
  the driver. (Per-range ``count_if`` expressions would be exact too, but Spark evaluates them
  interpreted, one per range per row: 8 ranges cost 5 s per 5,000,000 records, 64 ranges 35 s.)
* the records outside their planned range, looked up per row by key in two literal arrays of the
  planned offsets (exact, a stronger check than per-range min/max), and the first of them;
* the bytes read, and the rejected records themselves (rare: the driver writes them after the data).

``reports`` turns the observed values into the manifest's per-range reports, failing loudly if any
record lies outside the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from offsetbatch.errors import OffsetbatchError, OffsetOutOfPlanError, SchemaIncompatibleError
from offsetbatch.formats import ERROR, FATAL, SKIP
from offsetbatch.jobspec import JobSpec, RangeReport
from offsetbatch.spark_session import observe

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation, SparkSession
    from pyspark.sql.types import StructType

BINS = 100_000_000  # histogram bins kept before any merge: never reached (a bin per range per Spark task)
# The columns observe_batch adds for its metrics (the caller drops them after the observation).
WORK_COLUMNS = ("_value_bytes", "_range_key", "_rejected_range_key", "_outside", "_fatal", "_rejected_row")
REJECTED_COLUMNS = (("kafka_topic", "STRING"), ("kafka_partition", "INT"), ("kafka_offset", "BIGINT"),
                    ("kafka_timestamp", "TIMESTAMP"), ("kafka_key", "BINARY"), ("raw_value", "BINARY"), ("error", "STRING"))
REJECTED_DDL = ", ".join(f"{name} {kind}" for name, kind in REJECTED_COLUMNS)


@dataclass(frozen=True)
class PlanKeys:
    """A dense integer key per planned (topic, partition), and the planned offsets by key."""

    topics: list[str]
    stride: int  # partitions per topic in the key space (max planned partition + 1)
    from_by_key: list[int | None]
    until_by_key: list[int | None]

    @classmethod
    def of(cls, spec: JobSpec) -> "PlanKeys":
        topics = sorted({r.topic for r in spec.offset_ranges})
        stride = max(r.partition for r in spec.offset_ranges) + 1
        starts: list[int | None] = [None] * (len(topics) * stride)
        ends: list[int | None] = [None] * (len(topics) * stride)
        for r in spec.offset_ranges:
            k = topics.index(r.topic) * stride + r.partition
            starts[k], ends[k] = r.from_offset, r.until_offset
        return cls(topics, stride, starts, ends)

    def key_of(self, topic: str, partition: int) -> int:
        return self.topics.index(topic) * self.stride + partition

    def key_column(self) -> "Column":
        """The row's key, NULL for a topic or partition not in the plan."""
        from pyspark.sql import functions as F

        topic_index = F.lit(None).cast("int")
        for i, t in reversed(list(enumerate(self.topics))):
            topic_index = F.when(F.col("kafka_topic") == t, F.lit(i)).otherwise(topic_index)
        p = F.col("kafka_partition")
        return F.when((p >= 0) & (p < self.stride), topic_index * self.stride + p)

    def outside_column(self, key: "Column") -> "Column":
        """True for a record that lies outside its planned range (or whose partition is not planned)."""
        from pyspark.sql import functions as F

        starts = F.try_element_at(F.lit(self.from_by_key).cast("array<bigint>"), key + 1)
        ends = F.try_element_at(F.lit(self.until_by_key).cast("array<bigint>"), key + 1)
        offset = F.col("kafka_offset")
        return key.isNull() | starts.isNull() | (offset < starts) | (offset >= ends)


def observe_batch(parsed: "DataFrame", spec: JobSpec, collect_rejected: bool = True,
                  keeps_value: bool = True, skips: bool = False) -> tuple["DataFrame", "Observation"]:
    """``parsed`` with the batch's metrics attached: they are filled by whatever action runs on it
    (the data write). ``collect_rejected``: also bring the rejected records to the driver.

    What the metrics look at is computed first, as columns (``WORK_COLUMNS``; the caller drops them
    after the observation): Spark compiles a projection, but evaluates the argument of a
    ``histogram_numeric`` or ``collect_list`` interpreted, row by row, so each metric gets a column
    (NULL for a good record, except the range key) and does no work of its own. This halves the
    observation's cost (``docs/performance.md``, *Avro*). Spark copies every row into the
    observation's input, with every column the frame has (it prunes no column through the
    observation), so for a format whose good rows drop ``value`` (``keeps_value`` False) the frame
    carries its length instead, the value itself only in a rejected record's row, and ``value``
    NULL (the caller drops it with the work columns). ``skips``: the format marks records that are
    not rows (``SKIP``, ``ValueFormat.skips``); they are counted. Nothing here asks ``parsed`` its
    columns: on Spark Connect each such question is a round trip in which the server analyzes the
    plan."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    keys = PlanKeys.of(spec)
    parsed = parsed.withColumn("_range_key", keys.key_column())  # once per row: it compares the topic's name
    key = F.col("_range_key")
    outside = keys.outside_column(key)
    rejected = F.col(ERROR).isNotNull()
    fatal = F.col(ERROR).startswith(FATAL)
    where = ["kafka_topic", "kafka_partition", "kafka_offset"]
    work = {
        "_value_bytes": F.coalesce(F.length("value"), F.lit(0)),
        "_range_key": key.cast("double"),
        "_rejected_range_key": F.when(rejected, key.cast("double")),
        "_outside": F.when(outside, F.struct(*where)),
        "_fatal": F.when(fatal, F.struct(*where, F.col(ERROR).alias("error"))),
        "_rejected_row": F.when(rejected, F.struct(
            *where, F.unix_micros("kafka_timestamp").alias("ts_micros"), "kafka_key", F.col("value").alias("raw_value"),
            F.col(ERROR).alias("error"))) if collect_rejected else F.lit(None),
    }
    if not keeps_value:  # in the same projection: one plan node fewer to analyze than a drop
        work["value"] = F.lit(None).cast("binary")
    frame = parsed.withColumns(work)  # _range_key, already there, becomes the double the histograms take
    metrics = [
        F.count(F.lit(1)).alias("rows"),
        F.count_if(F.col(ERROR).isNotNull()).alias("rejected"),
        F.sum("_value_bytes").alias("bytes"),
        F.histogram_numeric("_range_key", F.lit(BINS)).alias("rows_by_key"),
        F.histogram_numeric("_rejected_range_key", F.lit(BINS)).alias("rejected_by_key"),
        F.count("_outside").alias("outside"),
        F.min("_outside").alias("first_outside"),
        F.count("_fatal").alias("fatal"),
        F.min("_fatal").alias("first_fatal"),
        # the records' time span: the asset event's partitions are every hour it covers
        F.min(F.unix_micros("kafka_timestamp")).alias("first_record_us"),
        F.max(F.unix_micros("kafka_timestamp")).alias("last_record_us"),
        (F.count_if(F.col(SKIP).isNotNull()) if skips else F.lit(0)).alias("skipped"),
    ]
    if collect_rejected:
        metrics.append(F.collect_list("_rejected_row").alias("rejected_rows"))
    observation = Observation(f"offsetbatch-{spec.pipeline}-{spec.batch_id}")
    return observe(frame, observation, *metrics), observation  # spark_session: no analysis yet


def linked(out: "DataFrame", observation: "Observation") -> "DataFrame":
    """On Spark Connect, ``out`` with ``observation`` known to its client-side plan. The Connect
    client fills an observation only from the plan nodes it can see, and a SQL transform reaches
    the observed records through a relation bound by name: without this the server returns the
    metrics and the client drops them. The wrapper adds no node to what the server runs.
    (``pyspark.sql.connect.plan`` is internal: pinned pyspark 4.3.0, covered by the Spark Connect
    test.)"""
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
    from pyspark.sql.connect.plan import LogicalPlan

    class _WithObservation(LogicalPlan):
        def __init__(self, child: LogicalPlan) -> None:
            super().__init__(child)

        def plan(self, session):  # noqa: ANN001, ANN202 - Connect's own signature
            return self._child.plan(session)

        @property
        def observations(self) -> dict:
            return {**super().observations, str(observation._name): observation}

    return ConnectDataFrame(_WithObservation(out._plan), out._session)


def observed(observation: "Observation", spec: JobSpec, timeout: float = 300.0) -> dict:
    """The observation's values once the action that carries it has run. Bounded: Spark's own
    ``get`` waits forever if the action never evaluated the observed plan."""
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        values = pool.submit(lambda: observation.get).result(timeout)
        if not values:  # Spark Connect's get does not wait: empty when the metrics never came back
            raise concurrent.futures.TimeoutError
        return values
    except concurrent.futures.TimeoutError:
        raise OffsetbatchError(
            f"pipeline {spec.pipeline} batch {spec.batch_id}: Spark finished the write without reporting the "
            f"batch's statistics within {timeout:.0f} s (was the read pruned away by the transform, e.g. a LIMIT "
            f"or a constant-false WHERE?). Nothing is committed; the batch stays planned.") from None
    finally:
        pool.shutdown(wait=False)


def _counts(histogram: list | None) -> dict[int, int]:
    out: dict[int, int] = {}
    for b in histogram or []:
        k = int(round(b["x"]))
        out[k] = out.get(k, 0) + int(round(b["y"]))
    return out


def reports(spec: JobSpec, values: dict) -> list[RangeReport]:
    """Per planned range what was read; raises ``OffsetOutOfPlanError`` unless every record read lies
    inside its planned range, and if the per-range counts do not add up to the totals."""
    where = f"pipeline {spec.pipeline} batch {spec.output_id}"
    if values["outside"]:
        first = values["first_outside"]
        raise OffsetOutOfPlanError(
            f"{where}: Kafka returned {values['outside']} record(s) outside the planned ranges, the first "
            f"{first['kafka_topic']}/{first['kafka_partition']} offset {first['kafka_offset']}. This attempt's "
            f"staged files are never committed (it has no manifest); report this as a bug.")
    if values.get("fatal"):
        first = values["first_fatal"]
        raise SchemaIncompatibleError(
            f"{where}: {values['fatal']} record(s) cannot be decoded into the output, the first "
            f"{first['kafka_topic']}/{first['kafka_partition']} offset {first['kafka_offset']}: "
            f"{first['error'][len(FATAL):]}. Nothing is committed; the batch stays planned.")
    keys = PlanKeys.of(spec)
    rows, rejected = _counts(values["rows_by_key"]), _counts(values["rejected_by_key"])
    if sum(rows.values()) != values["rows"] or sum(rejected.values()) != values["rejected"]:
        raise OffsetbatchError(
            f"{where}: the per-range counts ({sum(rows.values())} read, {sum(rejected.values())} rejected) do not "
            f"add up to the totals ({values['rows']}, {values['rejected']}). Nothing is committed; report this as "
            f"a bug.")
    out = []
    for r in sorted(spec.offset_ranges, key=lambda r: (r.topic, r.partition)):
        k = keys.key_of(r.topic, r.partition)
        out.append(RangeReport(r.topic, r.partition, r.from_offset, r.until_offset, rows.get(k, 0),
                               rejected.get(k, 0), outside=0))
    return out


def rejected_schema(ts_micros: bool = False) -> "StructType":
    """``REJECTED_DDL`` as a Spark schema, built here: Spark Connect parses a DDL string on the
    server, a round trip. ``ts_micros``: the timestamp as the observation brings it (microseconds)."""
    from pyspark.sql import types as T

    kinds = {"STRING": T.StringType(), "INT": T.IntegerType(), "BIGINT": T.LongType(), "TIMESTAMP": T.TimestampType(),
             "BINARY": T.BinaryType()}
    return T.StructType([T.StructField("ts_micros", T.LongType()) if ts_micros and name == "kafka_timestamp"
                         else T.StructField(name, kinds[kind]) for name, kind in REJECTED_COLUMNS])


def rejected_frame(spark: "SparkSession", values: dict) -> "DataFrame":
    """The rejected records the observation brought to the driver, as the rejected output's rows."""
    from pyspark.sql import functions as F

    rows = [(r["kafka_topic"], r["kafka_partition"], r["kafka_offset"], r["ts_micros"], r["kafka_key"],
             r["raw_value"], r["error"]) for r in values["rejected_rows"]]
    df = spark.createDataFrame(rows, rejected_schema(ts_micros=True))
    return df.select("kafka_topic", "kafka_partition", "kafka_offset",
                     F.timestamp_micros("ts_micros").alias("kafka_timestamp"), "kafka_key", "raw_value", "error")
