"""The batch job's one pass (issue 18), in-process on the real broker: per-range statistics and the
rejected records come from the data write itself, record by record, read back with pyarrow; the
fallback for a batch whose rejected records do not fit the driver writes the same files."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow.parquet as pq
import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from offsetbatch.job import stats as job_stats
from offsetbatch.jobspec import JobSpec
from offsetbatch.sinks import sink_for
from offsetbatch.sinks.base import RejectedRows

pytestmark = pytest.mark.integration
SCHEMA = "event_id STRING, kind STRING, n INT"
BAD = {  # offset in partition 1 -> (value, reason)
    3: (b'{"event_id": "x", "kind": ', "malformed JSON"),
    7: (b'{"event_id": "y\xff", "kind": "k", "n": 1}', "value is not valid UTF-8"),
    8: (b'{"kind": "k", "n": 2}', "missing required field(s): event_id"),
    11: (b'{"event_id": "z", "kind": "k", "n": "many"}', "schema mismatch: value does not fit the declared schema"),
}


def _job():
    from offsetbatch.job import run

    return run


@pytest.fixture(scope="module")
def topic(kafka_broker):
    name = "one-pass"
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([NewTopic(name, 3, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
    for p in range(3):
        for i in range(40):
            value = BAD[i][0] if p == 1 and i in BAD else json.dumps({"event_id": f"{p}-{i}", "kind": "k", "n": i}).encode()
            producer.send(name, partition=p, value=value)
    producer.flush()
    producer.close()
    return name


def _spec(bootstrap: str, topic: str, table: str) -> JobSpec:
    ranges = [(0, 5, 35), (1, 0, 40), (2, 39, 40)]  # [from, until) per partition
    return JobSpec(pipeline="onepass", batch_id=4, output_id=4, bootstrap=bootstrap,
                   ranges=[{"topic": topic, "partition": p, "from_offset": a, "until_offset": b, "frontier_before": a}
                           for p, a, b in ranges],
                   sink={"type": "files", "path": table}, value_format="json", schema_ddl=SCHEMA,
                   required=["event_id", "kind"], transform_sql="SELECT event_id, n, kafka_partition, kafka_offset "
                   "FROM records WHERE n % 2 = 0", transform_python=None, isolation_level="read_uncommitted",
                   records_per_task=7)  # several Spark tasks per range: their partial statistics merge


def _rows(files: list[str]) -> list[dict]:
    return [row for f in files for row in pq.read_table(f).to_pylist()]


@pytest.mark.parametrize("generated_code", [False, True], ids=["interpreted", "generated-code"])
def test_statistics_and_rejected_records_come_from_the_one_write(kafka_broker, spark, topic, tmp_path, caplog,
                                                                 monkeypatch, generated_code):
    """Both ways Spark evaluates a batch (job.codegen: a small one interpreted, a large one with
    generated code) give the same rows, rejections and reasons; the small batch is written by two
    tasks (job.read.in_few_tasks), the other by a task per split of its ranges, with the same
    statistics."""
    from offsetbatch.job import codegen

    if generated_code:
        monkeypatch.setattr(codegen, "SMALL_BATCH_RECORDS", 0)
    job = _job()
    spec = _spec(kafka_broker.bootstrap, topic, str(tmp_path / "table"))
    with caplog.at_level("INFO", logger="offsetbatch.job"):
        manifest = job.run(spark, spec, "a1")
    assert ("evaluated without generated code" in caplog.text) is not generated_code
    assert spark.conf.get("spark.sql.codegen.factoryMode", "FALLBACK") == "FALLBACK"  # the session as it was

    by_partition = {r.partition: r for r in manifest.ranges}
    assert {p: (r.rows, r.rejected, r.outside) for p, r in by_partition.items()} == {
        0: (30, 0, 0), 1: (40, 4, 0), 2: (1, 0, 0)}
    assert (manifest.rows_in, manifest.rows_rejected) == (71, 4)
    data = _rows(manifest.data_files)
    expected = sorted((p, i) for p, a, b in [(0, 5, 35), (1, 0, 40), (2, 39, 40)] for i in range(a, b)
                      if not (p == 1 and i in BAD) and i % 2 == 0)
    assert sorted((r["kafka_partition"], r["kafka_offset"]) for r in data) == expected
    assert manifest.rows_out == len(data)  # the write's own count, checked against the files
    # two tasks, a file each; else 11 splits (records_per_task 7), a file each but where the transform kept no row
    assert len(manifest.data_files) == 2 if not generated_code else len(manifest.data_files) > 2
    rejected = _rows(manifest.rejected_files)
    assert {r["kafka_offset"]: (r["raw_value"], r["error"]) for r in rejected} == BAD
    assert all(r["kafka_partition"] == 1 and r["kafka_timestamp"] is not None for r in rejected)
    assert manifest.bytes_in == sum(len(v) for v in (
        BAD[i][0] if p == 1 and i in BAD else json.dumps({"event_id": f"{p}-{i}", "kind": "k", "n": i}).encode()
        for p, a, b in [(0, 5, 35), (1, 0, 40), (2, 39, 40)] for i in range(a, b)))

    # The fallback when the collected rejected records exceed spark.driver.maxResultSize: the
    # same data and the same rejected rows, the rejected ones from a second read of the ranges.
    assert job._too_many_rejected(RuntimeError("Total size of serialized results of 3 tasks (300.0 MiB) is bigger "
                                               "than spark.driver.maxResultSize (256.0 MiB)"))
    staged, values = job._write_batch(spark, spec, sink_for(spec.pipeline, spec.sink), "a2", None,
                                      collect_rejected=False)
    assert "rejected_rows" not in values
    assert job_stats.reports(spec, values) == manifest.ranges
    assert sorted((r["kafka_partition"], r["kafka_offset"]) for r in _rows(staged.data_files)) == expected
    assert {r["kafka_offset"]: (r["raw_value"], r["error"]) for r in _rows(staged.rejected_files)} == BAD


def test_every_record_outside_its_planned_range_is_counted_and_refused(spark):
    spec = _spec("unused:9092", "t", "/unused")
    rows = [("t", 0, 5), ("t", 0, 34), ("t", 2, 39),  # inside
            ("t", 0, 4), ("t", 0, 35), ("t", 2, 40), ("t", 3, 0), ("other", 0, 10), ("t", -1, 1)]  # outside
    # Every record read from Kafka carries its timestamp: the batch's record span is its min and max.
    stamps = [datetime(2026, 11, 4, h, tzinfo=timezone.utc) for h in (3, 1, 7, 2, 2, 2, 2, 2, 2)]
    records = spark.createDataFrame([(t, p, o, ts, "x", None) for (t, p, o), ts in zip(rows, stamps, strict=True)],
                                    "kafka_topic STRING, kafka_partition INT, kafka_offset BIGINT, "
                                    "kafka_timestamp TIMESTAMP, value STRING, _error STRING")
    observed, observation = job_stats.observe_batch(records, spec, collect_rejected=False)
    observed.write.format("noop").mode("overwrite").save()
    values = job_stats.observed(observation, spec)
    assert values["outside"] == 6
    assert tuple(values["first_outside"]) == ("other", 0, 10)  # the smallest (topic, partition, offset)
    assert (values["first_record_us"], values["last_record_us"]) == (
        int(stamps[1].timestamp() * 1e6), int(stamps[2].timestamp() * 1e6))
    with pytest.raises(job_stats.OffsetOutOfPlanError, match=r"6 record\(s\) outside the planned ranges, the "
                                                             r"first other/0 offset 10"):
        job_stats.reports(spec, values)


def test_the_files_sink_writes_timestamps_every_reader_reads(spark, tmp_path):
    """Spark's default INT96 timestamps come back from pyarrow (the README's Python read path) as
    nanoseconds: 9999-12-31 overflowed into 1816. The sink writes INT64 microseconds instead."""
    from zoneinfo import ZoneInfo

    from pyspark.sql import functions as F

    from offsetbatch.sinks import FilesSink

    sink = FilesSink.at(str(tmp_path / "table"), "ts")
    data = spark.createDataFrame([("late", "9999-12-31 23:59:59.123456"), ("early", "1900-01-01 00:00:00")],
                                 "id STRING, t STRING").select("id", F.to_timestamp("t").alias("event_time"))
    staged = sink.stage(spark, data, RejectedRows(lambda: spark.createDataFrame([], "raw_value BINARY")), 1, "a1")
    got = {r["id"]: r["event_time"] for r in _rows(staged.data_files)}
    local = ZoneInfo(spark.conf.get("spark.sql.session.timeZone"))  # to_timestamp reads the text in it
    expected = {"late": datetime(9999, 12, 31, 23, 59, 59, 123456, tzinfo=local),
                "early": datetime(1900, 1, 1, tzinfo=local)}
    assert {k: v.astimezone(timezone.utc) for k, v in got.items()} == {
        k: v.astimezone(timezone.utc) for k, v in expected.items()}
    assert pq.ParquetFile(staged.data_files[0]).schema_arrow.field("event_time").type.unit == "us"


def test_a_batch_without_rejected_records_gets_the_empty_file_spark_would_write(spark, tmp_path):
    """A batch that rejected nothing (the usual case) has its empty rejected file written without a
    Spark job; its schema is exactly that of the file Spark writes for the same empty frame, also
    when the job gives the schema it builds itself (``rejected_schema``) and no frame is made."""
    from offsetbatch.job.stats import REJECTED_DDL, rejected_schema
    from offsetbatch.sinks import FilesSink

    def no_frame():
        raise AssertionError("the rows' schema was given: no frame is needed for an empty file")

    data = spark.createDataFrame([("a",)], "id STRING")
    empty = RejectedRows(lambda: spark.createDataFrame([], REJECTED_DDL))
    by_spark = FilesSink.at(str(tmp_path / "spark"), "r").stage(spark, data, empty, 1, "a1")
    known = RejectedRows(lambda: spark.createDataFrame([], REJECTED_DDL), known_empty=lambda: True)
    direct = FilesSink.at(str(tmp_path / "direct"), "r").stage(spark, data, known, 1, "a1")
    given = RejectedRows(no_frame, known_empty=lambda: True, schema=rejected_schema())
    job = FilesSink.at(str(tmp_path / "job"), "r").stage(spark, data, given, 1, "a1")

    [spark_file], [direct_file], [job_file] = by_spark.rejected_files, direct.rejected_files, job.rejected_files
    for file in (direct_file, job_file):
        assert pq.ParquetFile(file).metadata.num_rows == 0
        assert pq.read_schema(file).remove_metadata() == pq.read_schema(spark_file).remove_metadata()
        assert spark.read.parquet(file).schema == spark.read.parquet(spark_file).schema


@pytest.mark.parametrize("sql, headers_read", [
    ("SELECT event_id, kafka_headers FROM records", True),
    ("SELECT * FROM records", True),
    ("SELECT event_id, kafka_offset FROM records", False),
])
def test_headers_are_read_exactly_when_the_output_can_hold_them(kafka_broker, spark, tmp_path, sql, headers_read):
    """The job asks Spark's Kafka source for the headers only when the transform's output can
    contain them; when it does, every record's headers land in the output as produced."""
    from dataclasses import replace

    name = "one-pass-headers"
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    if name not in admin.list_topics():
        admin.create_topics([NewTopic(name, 1, 1)])
        producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
        for i in range(10):
            producer.send(name, partition=0, value=json.dumps({"event_id": f"h{i}", "kind": "k", "n": i}).encode(),
                          headers=[("trace", f"t{i}".encode()), ("n", bytes([i]))])
        producer.flush()
        producer.close()
    admin.close()
    spec = replace(_spec(kafka_broker.bootstrap, name, str(tmp_path / "table")), transform_sql=sql,
                   ranges=[{"topic": name, "partition": 0, "from_offset": 0, "until_offset": 10, "frontier_before": 0}])
    from offsetbatch.job.read import reads_headers

    assert reads_headers(spec) is headers_read
    manifest = _job().run(spark, spec, "a1")
    rows = {r["event_id"]: r for r in _rows(manifest.data_files)}
    assert len(rows) == 10
    if headers_read:
        assert {k: [(h["key"], h["value"]) for h in r["kafka_headers"]] for k, r in rows.items()} == {
            f"h{i}": [("trace", f"t{i}".encode()), ("n", bytes([i]))] for i in range(10)}
    else:
        assert "kafka_headers" not in next(iter(rows.values()))


def test_the_ranges_are_read_by_the_kafka_sources_v2_reader(kafka_broker, spark, topic):
    """The job takes ``kafka`` off ``spark.sql.sources.useV1SourceList`` (the V1 relation copies
    every record twice, docs/performance.md) and keeps the session's other V1 sources; the V2 scan
    reads exactly the planned ranges."""
    from offsetbatch.job.read import V1_SOURCES, read_ranges

    before = spark.conf.get(V1_SOURCES)
    spark.conf.set(V1_SOURCES, "csv,Kafka,parquet")
    try:
        records = read_ranges(spark, _spec(kafka_broker.bootstrap, topic, "/unused"))
        assert spark.conf.get(V1_SOURCES) == "csv,parquet"
        plan = records._jdf.queryExecution().executedPlan().toString()
        assert "BatchScan" in plan and "KafkaRelation" not in plan
        got = sorted((r.partition, r.offset) for r in records.select("partition", "offset").collect())
        assert got == sorted((p, o) for p, a, b in [(0, 5, 35), (1, 0, 40), (2, 39, 40)] for o in range(a, b))
    finally:
        spark.conf.set(V1_SOURCES, before)
