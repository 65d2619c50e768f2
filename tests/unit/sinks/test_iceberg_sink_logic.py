"""The iceberg sink's logic without a catalog: settings (names, partition specs, the catalog's
default from the ledger), which column changes Iceberg can take, and snapshot markers."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pydantic import ValidationError

from offsetbatch.errors import SinkSchemaError
from offsetbatch.jobspec import Manifest, RangeReport
from offsetbatch.sinks import settings_for
from offsetbatch.sinks.iceberg import markers, schema
from offsetbatch.sinks.iceberg.catalog import catalog_url, sibling_catalog
from offsetbatch.sinks.iceberg.settings import parse_partition

BASE = {"type": "iceberg", "path": "/s", "namespace": "ns", "table": "events", "warehouse": "/w"}


@pytest.mark.parametrize("spec, parsed", [("country", ("identity", "country")), ("day(event_time)", ("day", "event_time")),
                                          ("hour( ts )", ("hour", "ts")), ("year(d)", ("year", "d"))])
def test_partition_specs(spec, parsed):
    assert parse_partition(spec) == parsed


@pytest.mark.parametrize("field, value, message", [
    ("partition_by", ["week(ts)"], "neither a column name nor year|month|day|hour(column)"),
    ("partition_by", ["day(ts)", "day(ts)"], "repeats"),
    ("table", "events;drop", "must be letters, digits and '_'"),
    ("namespace", "a.b", "must be letters, digits and '_'"),
    ("warehouse", "relative/dir", "must be an absolute path or a URI"),
    ("event_time_column", "ts", "use partition_by"),
    ("catalgo", "x", "Extra inputs are not permitted"),
])
def test_settings_refusals_name_the_field(field, value, message):
    with pytest.raises((ValidationError, ValueError), match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("|", r"\|")):
        settings_for({**BASE, field: value})


def test_the_catalog_defaults_to_the_ledger_and_never_reaches_a_job_spec():
    from offsetbatch.config import PipelineConfig

    def cfg(ledger, **sink):
        return PipelineConfig.model_validate({"name": "p", "kafka": {"topics": ["t"]}, "sink": {**BASE, **sink},
                                              "ledger": ledger})

    pg = "postgresql://u:secret@h/db"
    s = cfg({"url": pg}).sink
    assert (s.catalog, s.catalog_is_ledger) == (pg, True)
    assert "catalog" not in s.model_dump() and "secret" not in str(s.model_dump())
    s = cfg({"conn_id": "my_ledger"}).sink
    assert (s.catalog, s.catalog_is_ledger) == ("my_ledger", True)
    s = cfg({"url": "sqlite:////data/ledger.db"}).sink
    assert catalog_url(s, "p") == "sqlite:////data/ledger.iceberg.db"  # never the ledger's own SQLite file
    s = cfg({"url": "sqlite:////data/ledger.db"}, catalog="sqlite:////data/ledger.db").sink
    assert catalog_url(s, "p") == "sqlite:////data/ledger.iceberg.db"
    s = cfg({"url": "sqlite:////data/ledger.db"}, catalog="postgresql://u@h/cat").sink
    assert (catalog_url(s, "p"), s.catalog_is_ledger) == ("postgresql://u@h/cat", False)
    assert sibling_catalog("/x/ledger") == "/x/ledger.iceberg.db"


def _arrow(**cols) -> pa.Schema:
    return pa.schema([pa.field(n, t) for n, t in cols.items()])


def test_compatible_changes_and_refusals():
    table = schema.to_iceberg(_arrow(a=pa.int32(), b=pa.float32(), c=pa.decimal128(10, 2), d=pa.string(),
                                     e=pa.int64()))
    assert schema.incompatible(table, _arrow(a=pa.int64(), b=pa.float64(), c=pa.decimal128(12, 2), new=pa.string()))\
        == []  # widened by the table
    assert schema.incompatible(table, _arrow(e=pa.int32())) == []  # narrower file: readers promote
    problems = schema.incompatible(table, _arrow(a=pa.string(), c=pa.decimal128(12, 3), d=pa.int64()))
    assert [p.split(" is ")[0] for p in problems] == ["column 'a'", "column 'c'", "column 'd'"]
    with pytest.raises(SinkSchemaError, match=r"pipeline p batch 4, table t: column 'd' is string in the table but the "
                                              r"batch's rows have long.*Nothing was committed"):
        schema.check(table, _arrow(d=pa.int64()), "pipeline p batch 4, table t")


def test_markers_round_trip_and_the_live_outputs():
    from pyiceberg.table.snapshots import Operation, Snapshot, Summary

    ranges = [RangeReport("t", 0, 10, 20, 9, 1, 10, 19, 900)]
    manifest = Manifest(pipeline="p", output_id=1, ranges=ranges, rows_in=10, rows_out=9, rows_rejected=1,
                        bytes_in=900, data_files=[], rejected_files=[], job_seconds=1.5, spark_version="4.3.0",
                        attempt="a1")

    def snap(i, props):
        return Snapshot(snapshot_id=i, sequence_number=i, timestamp_ms=i, manifest_list="x",
                        summary=Summary(Operation.APPEND, **props))

    one = markers.marker_of(snap(1, markers.summary("p", 1, 1, "incremental", manifest, [])))
    assert (one.batch_id, one.output_id, one.kind, one.attempt, one.retired) == (1, 1, "incremental", "a1", ())
    assert one.ranges == ranges and one.manifest().rows_out == 9 and one.manifest().attempt == "a1"
    replay = markers.marker_of(snap(3, markers.summary("p", 3, 1, "replay", manifest, [2])))
    retire = markers.marker_of(snap(4, markers.retirement("p", [5])))
    assert (retire.batch_id, retire.output_id, retire.retired) == (None, None, (5,))
    assert markers.marker_of(snap(9, {"spark.app.id": "x"})) is None  # another writer's snapshot
    assert replay.retired == (2,)
