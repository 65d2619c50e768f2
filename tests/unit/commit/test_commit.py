"""The commit's manifest checks and the publish step's crash-safety, on a local folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from offsetbatch import storage
from offsetbatch.commit.manifest_check import validate_manifest
from offsetbatch.errors import ManifestError
from offsetbatch.jobspec import Manifest, RangeReport
from offsetbatch.model import Batch, OffsetRange
from offsetbatch.sinks.rejected_files import RejectedFolders
from offsetbatch.sinks.files import FilesSink, TableLayout


def _batch() -> Batch:
    return Batch("p", 3, "incremental", "planned", [OffsetRange("t", 0, 100, 200, 100), OffsetRange("t", 1, 0, 50, 0)])


def _manifest(**override) -> Manifest:
    ranges = [RangeReport("t", 0, 100, 200, 100, 2, 100, 199, 1000), RangeReport("t", 1, 0, 50, 50, 0, 0, 49, 500)]
    m = Manifest("p", 3, ranges, 150, 148, 2, 1500, [], [], 1.0, "4.3.0")
    for k, v in override.items():
        setattr(m, k, v)
    return m


def test_a_reconciled_manifest_passes():
    validate_manifest(_batch(), _manifest(), expect_offset_gaps=False)


def test_fewer_records_than_offsets_fails_on_plain_topics_only():
    short = _manifest(ranges=[RangeReport("t", 0, 100, 200, 90, 0, 100, 199, 900), RangeReport("t", 1, 0, 50, 50, 0, 0, 49, 500)], rows_in=140)
    with pytest.raises(ManifestError, match=r"t/0\[100,200\) holds 100 offsets but the job read 90 records"):
        validate_manifest(_batch(), short, expect_offset_gaps=False)
    validate_manifest(_batch(), short, expect_offset_gaps=True)


def test_offsets_outside_the_plan_fail():
    bad = _manifest(ranges=[RangeReport("t", 0, 100, 200, 100, 0, 99, 198, 1), RangeReport("t", 1, 0, 50, 50, 0, 0, 49, 1)])
    with pytest.raises(ManifestError, match="offsets 99..198 of t/0 lie outside"):
        validate_manifest(_batch(), bad, expect_offset_gaps=False)


def test_a_missing_partition_fails():
    with pytest.raises(ManifestError, match="the manifest covers partitions"):
        validate_manifest(_batch(), _manifest(ranges=_manifest().ranges[:1], rows_in=100), expect_offset_gaps=False)


def _stage(layout: TableLayout, attempt: str, content: str, batch_id: int = 3) -> None:
    for sub in ("data", "rejected"):
        d = Path(layout.attempt(batch_id, attempt)) / sub
        d.mkdir(parents=True)
        (d / "part-0.parquet").write_text(content)
    Path(layout.staging_manifest(batch_id, attempt)).write_text("{}")


def test_publish_replaces_earlier_output_and_is_idempotent(tmp_path):
    sink = FilesSink.at(str(tmp_path / "table"))
    layout = sink.layout
    _stage(layout, "a1", "old")
    sink.publish(3, 3, "a1")
    _stage(layout, "a2", "new")
    _stage(layout, "a3", "loser")  # a concurrent attempt: discarded
    sink.publish(3, 3, "a2")
    sink.publish(3, 3, "a2")  # a crash-and-rerun of publish changes nothing
    assert (Path(layout.data(3)) / "part-0.parquet").read_text() == "new"
    assert (Path(RejectedFolders(layout.root).of(3)) / "part-0.parquet").read_text() == "new"
    assert not Path(layout.attempts(3)).exists() and not Path(layout.meta, "trash").exists()


def test_publish_finishes_after_a_crash_between_its_moves(tmp_path):
    sink = FilesSink.at(str(tmp_path / "table"))
    layout = sink.layout
    _stage(layout, "a1", "v1")
    Path(layout.data(3)).parent.mkdir(parents=True, exist_ok=True)
    Path(layout.staging_data(3, "a1")).rename(layout.data(3))  # crash after the first rename
    sink.publish(3, 3, "a1")
    assert (Path(RejectedFolders(layout.root).of(3)) / "part-0.parquet").read_text() == "v1"
    assert (Path(layout.data(3)) / "part-0.parquet").read_text() == "v1"


def test_publishing_one_replay_leaves_another_replays_staging_alone(tmp_path):
    """Replays 5 and 6 both replace batch 3's output; each stages under its own id, so publishing
    5 cannot delete what 6 is still writing (or has written)."""
    sink = FilesSink.at(str(tmp_path / "table"))
    layout = sink.layout
    _stage(layout, "a1", "replay-5", batch_id=5)
    _stage(layout, "b1", "replay-6", batch_id=6)
    sink.publish(5, 3, "a1")
    assert (Path(layout.data(3)) / "part-0.parquet").read_text() == "replay-5"
    assert not Path(layout.attempts(5)).exists()
    assert Path(layout.staging_manifest(6, "b1")).exists()
    sink.publish(6, 3, "b1")
    assert (Path(layout.data(3)) / "part-0.parquet").read_text() == "replay-6"


def test_records_the_job_counted_outside_the_plan_fail():
    ranges = _manifest().ranges
    ranges[0].outside = 3
    with pytest.raises(ManifestError, match="3 record\\(s\\) of t/0 lie outside"):
        validate_manifest(_batch(), _manifest(ranges=ranges), expect_offset_gaps=False)


def test_a_batch_of_no_records_publishes_no_empty_folder(tmp_path):
    """Issue 41, case 4: ranges holding only transaction markers or aborted records published empty
    batch folders. The manifest is still published (the marker that the batch is in), and a replay
    that reads nothing removes what the batch held before."""
    sink = FilesSink.at(str(tmp_path / "table"))
    layout = sink.layout
    _stage(layout, "a1", "old")
    sink.publish(3, 3, "a1")
    assert (Path(layout.data(3)) / "part-0.parquet").read_text() == "old"
    for sub in ("data", "rejected"):
        (Path(layout.attempt(3, "a2")) / sub).mkdir(parents=True)
    Manifest("p", 3, [RangeReport("t", 0, 100, 102, 0, 0)], 0, 0, 0, 0, [], [], 1.0, "4.3.0",
             attempt="a2").save(layout.staging_manifest(3, "a2"))
    published = layout.manifest(3)
    real_remove = storage.remove

    def crash_after_the_manifest(uri, best_effort=False):  # the publish dies before removing the attempt
        raise RuntimeError("killed")
    storage.remove = crash_after_the_manifest
    try:
        with pytest.raises(RuntimeError):
            sink.publish(3, 3, "a2")
    finally:
        storage.remove = real_remove
    assert Manifest.load(published).attempt == "a2" and Path(layout.attempt(3, "a2"), "data").exists()
    sink.publish(3, 3, "a2")  # the roll-forward finishes it: still no empty folder
    assert not Path(layout.data(3)).exists() and not Path(RejectedFolders(layout.root).of(3)).exists()
    assert Manifest.load(layout.manifest(3)).attempt == "a2" and sink.published_ids() == [3]
    assert not Path(layout.attempts(3)).exists()
