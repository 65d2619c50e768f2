"""The job's observed statistics turned into the manifest's per-range reports (pure Python)."""

from __future__ import annotations

import pytest

from offsetbatch.errors import OffsetbatchError
from offsetbatch.job import stats as job_stats
from offsetbatch.jobspec import JobSpec


def _spec() -> JobSpec:
    ranges = [("b", 0, 10, 20), ("a", 2, 0, 5), ("a", 0, 7, 9)]
    return JobSpec(pipeline="p", batch_id=3, output_id=3, bootstrap="x:1",
                   ranges=[{"topic": t, "partition": p, "from_offset": f, "until_offset": u, "frontier_before": f}
                           for t, p, f, u in ranges],
                   sink={"type": "files", "path": "/t"}, value_format="raw", schema_ddl=None, required=[],
                   transform_sql=None, transform_python=None, isolation_level="read_committed", records_per_task=10)


def test_plan_keys_are_dense_per_topic_and_partition():
    keys = job_stats.PlanKeys.of(_spec())
    assert (keys.topics, keys.stride) == (["a", "b"], 3)
    assert [keys.key_of("a", 0), keys.key_of("a", 2), keys.key_of("b", 0)] == [0, 2, 3]
    assert keys.from_by_key == [7, None, 0, 10, None, None]
    assert keys.until_by_key == [9, None, 5, 20, None, None]


def _values(**override) -> dict:
    # Partial histograms: one bin per Spark task, a key split over two tasks has two bins.
    values = {"rows": 17, "rejected": 2, "bytes": 170, "outside": 0, "first_outside": None,
              "rows_by_key": [{"x": 0.0, "y": 2.0}, {"x": 2.0, "y": 5.0}, {"x": 3.0, "y": 6.0}, {"x": 3.0, "y": 4.0}],
              "rejected_by_key": [{"x": 3.0, "y": 1.0}, {"x": 3.0, "y": 1.0}]}
    return {**values, **override}


def test_reports_sum_the_bins_of_each_range():
    reports = job_stats.reports(_spec(), _values())
    assert [(r.topic, r.partition, r.rows, r.rejected, r.outside) for r in reports] == [
        ("a", 0, 2, 0, 0), ("a", 2, 5, 0, 0), ("b", 0, 10, 2, 0)]


def test_counts_that_do_not_add_up_are_refused():
    with pytest.raises(OffsetbatchError, match="do not add up to the totals"):
        job_stats.reports(_spec(), _values(rows=18))


def test_a_record_outside_the_plan_is_refused_naming_it():
    values = _values(outside=2, first_outside={"kafka_topic": "b", "kafka_partition": 0, "kafka_offset": 20})
    with pytest.raises(job_stats.OffsetOutOfPlanError, match="2 record\\(s\\) outside the planned ranges, the first "
                                                             "b/0 offset 20"):
        job_stats.reports(_spec(), values)


@pytest.mark.parametrize("sql, python, expected", [
    (None, None, True),  # no transform: the output has every column, kafka_headers among them
    ("SELECT event_id FROM records", "m.f", True),  # a Python transform may use them
    ("SELECT event_id, kafka_offset FROM records", None, False),
    ("SELECT event_id, KAFKA_HEADERS[0].key AS k FROM records", None, True),
    ("SELECT * FROM records", None, True),
    ("SELECT r.* FROM records r", None, True),
    ("SELECT count(*) AS n FROM records", None, True),  # conservative: any * reads them
])
def test_headers_are_read_unless_the_sql_transform_cannot_output_them(sql, python, expected):
    from dataclasses import replace

    from offsetbatch.job.read import reads_headers

    assert reads_headers(replace(_spec(), transform_sql=sql, transform_python=python)) is expected


def test_a_record_whose_writer_schema_the_reader_cannot_read_fails_the_batch_naming_it():
    values = _values(fatal=3, first_fatal={"kafka_topic": "a", "kafka_partition": 0, "kafka_offset": 8,
                                           "error": "fatal: the reader schema (x) cannot read writer schema id 3"})
    with pytest.raises(job_stats.SchemaIncompatibleError,
                       match=r"pipeline p batch 3: 3 record\(s\) cannot be decoded into the output, the first a/0 "
                             r"offset 8: the reader schema \(x\) cannot read writer schema id 3\. Nothing is "
                             r"committed; the batch stays planned\."):
        job_stats.reports(_spec(), values)


@pytest.mark.parametrize("value_format, schema_id, expected", [
    ("confluent-avro", "prefix", False), ("confluent-avro", "auto", True), ("confluent-avro", "header", True),
    ("confluent-json", "auto", True), ("json", "auto", False),
    ("confluent-protobuf", "prefix", False), ("confluent-protobuf", "auto", True),
])
def test_a_schema_id_in_a_header_makes_the_job_read_headers(value_format, schema_id, expected):
    from dataclasses import replace

    from offsetbatch.job.read import reads_headers

    spec = replace(_spec(), value_format=value_format, schema_id=schema_id, transform_sql="SELECT event_id FROM records")
    assert reads_headers(spec) is expected
