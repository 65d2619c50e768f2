"""The files sink's compaction as logic (``sinks.files``): row spans, file sizes, schemas,
intents that finish whatever a crash left, and the group manifest's round trip. The integration
module runs it all on a published table, with SIGKILLs."""

from __future__ import annotations

import os
from dataclasses import asdict
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from offsetbatch.jobspec import Manifest, RangeReport
from offsetbatch.sinks.base import Maintained
from offsetbatch.sinks.files import FilesSink
from offsetbatch.sinks.files import compaction, groups, intents
from offsetbatch.sinks.files import layout as where
from offsetbatch.sinks.maintenance import Horizon, MaintenanceSettings, MiB


def _table(n: int, start: int = 0, **extra: pa.Array) -> pa.Table:
    return pa.table({"offset": pa.array(range(start, start + n), pa.int64()), **extra})


def test_the_files_sink_is_maintained_and_a_fresh_table_has_nothing_to_do(tmp_path):
    sink = FilesSink.at(str(tmp_path / "t"))
    now = datetime.now(timezone.utc)
    assert isinstance(sink, Maintained)
    assert sink.maintenance(MaintenanceSettings(), Horizon(now, now, now, now)) == []


def test_a_partition_writer_rolls_at_the_target_and_notes_each_members_span(tmp_path):
    writer = compaction._PartitionWriter(str(tmp_path), "event_date=2026-11-26", 7, target=100)
    for member, size in ((1, 60), (2, 60), (3, 10)):  # the first file is full after member 2
        writer.add(member, _table(5, member * 10), size)
    writer.add(3, _table(2, 35), 10)  # the same member again: one span grows
    writer.close()
    assert writer.spans == {"event_date=2026-11-26/part-compacted-7-00000.parquet": [[1, 0, 5], [2, 5, 10]],
                            "event_date=2026-11-26/part-compacted-7-00001.parquet": [[3, 0, 7]]}
    second = pq.read_table(tmp_path / "event_date=2026-11-26/part-compacted-7-00001.parquet")
    assert second["offset"].to_pylist() == [30, 31, 32, 33, 34, 35, 36]


def test_a_schema_change_starts_a_file_of_its_own(tmp_path):
    writer = compaction._PartitionWriter(str(tmp_path), "", 1, target=10**9)
    writer.add(1, _table(2), 1)
    writer.add(2, _table(2, extra=pa.array(["a", "b"])), 1)
    writer.close()
    assert list(writer.spans) == ["part-compacted-1-00000.parquet", "part-compacted-1-00001.parquet"]


def test_an_added_column_reads_null_in_older_rows_and_a_type_conflict_splits(tmp_path):
    old, new, clash = (str(tmp_path / n) for n in ("old.parquet", "new.parquet", "clash.parquet"))
    pq.write_table(_table(2), old)
    pq.write_table(_table(1, extra=pa.array(["x"])), new)
    pq.write_table(pa.table({"offset": pa.array(["not a number"])}), clash)
    unified = compaction._unified([old, new])
    assert unified.names == ["offset", "extra"]
    assert compaction._conform(pq.read_table(old), unified)["extra"].to_pylist() == [None, None]
    assert compaction._unified([old, clash]) is None


def test_taking_a_member_out_keeps_the_others_spans_exact(tmp_path):
    data, staged, trash = str(tmp_path / "batch_id=1"), str(tmp_path / "staged"), str(tmp_path / "trash")
    os.makedirs(f"{data}/event_date=D")
    pq.write_table(pa.concat_tables([_table(3, 100), _table(4, 200), _table(2, 300)]),
                   f"{data}/event_date=D/part-compacted-1-00000.parquet")
    pq.write_table(_table(5, 400), f"{data}/event_date=D/part-compacted-1-00001.parquet")
    group = where.GroupManifest(1, [1, 2, 3, 4], {
        "event_date=D/part-compacted-1-00000.parquet": [[1, 0, 3], [2, 3, 7], [3, 7, 9]],
        "event_date=D/part-compacted-1-00001.parquet": [[4, 0, 5]]})
    moves, files = groups._without_member(group, 2, data, staged, trash, 9)
    assert files["event_date=D/part-compacted-1-00001.parquet"] == [[4, 0, 5]]
    (new_rel,) = [r for r in files if "-9-" in r]
    assert files[new_rel] == [[1, 0, 3], [3, 3, 5]]
    assert pq.read_table(f"{staged}/{new_rel}")["offset"].to_pylist() == [100, 101, 102, 300, 301]
    assert moves == [[f"{data}/event_date=D/part-compacted-1-00000.parquet",
                      f"{trash}/event_date=D/part-compacted-1-00000.parquet"],
                     [f"{staged}/{new_rel}", f"{data}/{new_rel}"]]


def test_an_intent_carried_out_twice_ends_the_same(tmp_path):
    """A process killed after any step reruns the whole intent: every step already done is skipped."""
    layout = where.CompactionLayout(str(tmp_path / "_offsetbatch"))
    for name in ("a", "b"):
        os.makedirs(tmp_path / name)
        (tmp_path / name / "part.parquet").write_text(name)
    manifest = where.GroupManifest(1, [1, 2], {"part.parquet": [[1, 0, 1]]})
    intent = intents.Intent(1, "compaction", [[str(tmp_path / "a"), str(tmp_path / "trash/a")],
                                         [str(tmp_path / "b"), str(tmp_path / "a")]],
                       asdict(manifest), set_members=[1, 2])
    intents.write_intent(layout, intent)
    intents.carry_out(layout, intent, "")
    intents.write_intent(layout, intent)  # as if killed just before the intent was deleted
    assert intents.carry_out(layout, intent, "") == 0
    assert (tmp_path / "a/part.parquet").read_text() == "b"
    assert (tmp_path / "trash/a/part.parquet").read_text() == "a"
    assert where.GroupManifest.load_if_exists(layout.group(1)) == manifest
    assert not os.path.exists(layout.pending(1)) and os.path.exists(layout.member(2))


def test_a_staged_compaction_no_intent_names_is_an_orphan(tmp_path):
    layout = where.CompactionLayout(str(tmp_path))
    os.makedirs(layout.staged(1, 5))
    os.makedirs(layout.staged(2, 6))
    intents.write_intent(layout, intents.Intent(2, "compaction", [[layout.staged(2, 6), str(tmp_path / "batch_id=2")]], None))
    assert intents.orphaned_staging(layout) == [layout.staged(1, 5)]


def test_planning_reads_no_manifest_of_an_open_day_and_changes_nothing(tmp_path):
    sink = FilesSink.at(str(tmp_path / "t"))
    os.makedirs(sink.layout.data(1))
    pq.write_table(_table(1), f"{sink.layout.data(1)}/part-0.parquet")
    os.makedirs(os.path.dirname(sink.layout.manifest(1)))
    with open(sink.layout.manifest(1), "w") as f:
        f.write("not json: never read while its day is open")
    now = datetime.now(timezone.utc)
    policy = MaintenanceSettings(target_file_size=MiB, min_input_files=2)
    assert compaction.plan_groups(sink, policy, Horizon(now, now - timedelta(days=7), now - timedelta(days=1), now)) == []


def test_an_old_manifest_still_loads_and_saves_unchanged(tmp_path):
    m = Manifest("p", 3, [RangeReport("t", 0, 0, 5, 5, 0)], 5, 5, 0, 50, [], [], 1.0, "4.3.0", attempt="a")
    m.save(str(tmp_path / "m.json"))
    assert Manifest.load(str(tmp_path / "m.json")) == m


@pytest.mark.parametrize("now", [datetime(2026, 11, 27, 0, 5, tzinfo=timezone.utc), datetime(2026, 11, 27, 0, 5)])
def test_a_naive_now_is_utc(now):
    assert where.utc(now).tzinfo is not None


# ---- a table on an object store: retention of abandoned attempts only --------------------------

def _stage_in(bucket, sink: FilesSink, batch_id: int, attempt: str) -> None:
    data = f"{sink.layout.staging_data(batch_id, attempt)}/part-00000.parquet"
    with bucket.open(data.partition("://")[2], "wb") as out:
        out.write(b"PAR1")
    Manifest(pipeline="orders", output_id=batch_id, ranges=[RangeReport("t", 0, 0, 10, 10, 0)], rows_in=10,
             rows_out=10, rows_rejected=0, bytes_in=100, data_files=[data], rejected_files=[], job_seconds=1.0,
             spark_version="4.3.0", attempt=attempt).save(sink.layout.staging_manifest(batch_id, attempt))


def test_on_an_object_store_retention_keeps_every_folder_a_manifest_names(bucket):
    sink = FilesSink.at("s3a://lake/orders", "orders", "lake")
    _stage_in(bucket, sink, 1, "a1")
    sink.publish(1, 1, "a1")
    _stage_in(bucket, sink, 1, "old")  # a losing attempt, written after the publish
    _stage_in(bucket, sink, 1, "young")
    for path, f in bucket.store.items():
        if "attempt=old" in path or "attempt=a1" in path:  # the published one is older still: it stays
            f.created = datetime.now(timezone.utc) - timedelta(days=30 if "a1" in path else 2)
    now = datetime.now(timezone.utc)
    horizon = Horizon(now, now - timedelta(days=7), now - timedelta(days=1), now)
    (action,) = sink.maintenance(MaintenanceSettings(), horizon)
    assert action.step == "files.retention" and action.counts["attempts"] == 1
    action.apply()
    assert not bucket.exists(sink.layout.attempt(1, "old").partition("://")[2])
    assert bucket.exists(sink.layout.staging_manifest(1, "young").partition("://")[2])
    assert bucket.exists(sink.layout.staging_manifest(1, "a1").partition("://")[2])
    assert sink.published_ids() == [1]
