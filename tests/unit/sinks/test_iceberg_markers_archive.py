"""The markers archive of the iceberg sink (``sinks/iceberg/markers.py``, *The archive*), without a
catalog: folding any prefix of a table's marker history into an archive, then reading the archive
plus the rest, gives the same live outputs and applied batches as the whole history."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

from offsetbatch.dag.retry_policy import is_permanent
from offsetbatch.errors import MarkersArchiveMissingError
from offsetbatch.jobspec import Manifest, RangeReport
from offsetbatch.sinks.iceberg import markers


def _marker(snapshot_id: int, batch_id: int | None, output_id: int | None, retired: tuple = (),
            kind: str = "incremental") -> markers.Published:
    if batch_id is None:
        props = markers.retirement("p", list(retired))
    else:
        ranges = [RangeReport("t", 0, output_id * 10, output_id * 10 + 10, 9, 1)]
        manifest = Manifest(pipeline="p", output_id=output_id, ranges=ranges, rows_in=10, rows_out=9,
                            rows_rejected=1, bytes_in=100 + batch_id, data_files=[], rejected_files=[],
                            job_seconds=0.5 * batch_id, spark_version="4.3.0", attempt=f"a{batch_id}")
        props = markers.summary("p", batch_id, output_id, kind, manifest, list(retired))
    return markers.Published(snapshot_id, "p", batch_id, output_id, kind, f"a{batch_id}" if batch_id else "",
                             tuple(retired), props)


# batches 1..8; 9 replays output 3; 10 rewinds over 5 and 6 (retiring them); a retirement of 7;
# 11 a new output; 12 replays output 3 again; 13 re-publishes the retired output 5
HISTORY = [_marker(100 + b, b, b) for b in range(1, 9)] + [
    _marker(109, 9, 3, kind="replay"), _marker(110, 10, 10, retired=(5, 6)), _marker(111, None, None, retired=(7,)),
    _marker(112, 11, 11), _marker(113, 12, 3, kind="replay"), _marker(114, 13, 5)]


def _view(live: dict[int, markers.Published]) -> dict:
    """What readers take from the live map (published_ids, published_manifests, locations_of,
    ``_remove_unless_live``)."""
    return {i: (m.snapshot_id, m.batch_id, m.attempt, m.kind, m.manifest()) for i, m in live.items()}


def test_ranges_are_compact_and_answer_membership():
    assert markers.ranges_of([7, 1, 2, 3, 5, 8, 2]) == ((1, 3), (5, 5), (7, 8))
    archive = markers.Archive(1, markers.ranges_of(range(1, 8761)), {})
    assert archive.applied == ((1, 8760),)
    assert [archive.has_applied(i) for i in (0, 1, 4000, 8760, 8761)] == [False, True, True, True, False]
    assert not markers.Archive().has_applied(1)


@pytest.mark.parametrize("k", range(len(HISTORY) + 1))
def test_any_prefix_folded_gives_the_same_live_outputs_and_applied_batches(k):
    archive = markers.fold(None, HISTORY[:k], HISTORY[k - 1].snapshot_id) if k else None
    combined = list(markers.combined(archive, HISTORY[k:]))
    assert _view(markers.live_of(combined)) == _view(markers.live_of(HISTORY))
    for batch_id in range(0, 15):
        whole = markers.applied_in(None, HISTORY, batch_id)
        folded = markers.applied_in(archive, list(markers.combined(archive, HISTORY[k:])), batch_id)
        assert (whole is None) == (folded is None), batch_id
        if whole is not None and whole.output_id is not None and markers.live_of(HISTORY).get(whole.output_id) == whole:
            assert folded.snapshot_id == whole.snapshot_id  # a live batch keeps its snapshot


def test_folding_twice_equals_folding_once_and_survives_encoding():
    once = markers.fold(None, HISTORY[:10], HISTORY[9].snapshot_id)
    first = markers.decode(markers.encode(markers.fold(None, HISTORY[:4], HISTORY[3].snapshot_id)))
    twice = markers.fold(first, HISTORY[4:10], HISTORY[9].snapshot_id)
    assert (twice.through_snapshot_id, twice.applied) == (once.through_snapshot_id, once.applied)
    assert _view(twice.live) == _view(once.live)
    assert list(twice.live) == list(once.live)  # the folding order too
    back = markers.decode(markers.encode(twice))
    assert back == twice and all(m.retired == () for m in back.live.values())
    assert "offsetbatch.retired" not in next(iter(back.live.values())).props


def test_the_archive_holds_no_retired_or_replaced_output():
    archive = markers.fold(None, HISTORY, HISTORY[-1].snapshot_id)
    assert sorted(archive.live) == [1, 2, 3, 4, 5, 8, 10, 11]
    assert archive.live[3].batch_id == 12 and archive.live[5].batch_id == 13
    assert archive.applied == ((1, 13),)


def test_the_retained_snapshots_after_the_archive():
    chain = [SimpleNamespace(snapshot_id=i) for i in (5, 6, 7, 8)]
    ids = lambda snaps: [s.snapshot_id for s in snaps]  # noqa: E731
    assert ids(markers.after_archive(chain, None)) == [5, 6, 7, 8]
    assert ids(markers.after_archive(chain, markers.Archive(6))) == [7, 8]  # killed before the expiry: 5, 6 folded
    assert ids(markers.after_archive(chain, markers.Archive(3))) == [5, 6, 7, 8]  # 3 expired
    assert ids(markers.after_archive(chain, markers.Archive(8))) == []


def test_an_archive_of_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="format 2 is not 1: written by a newer offsetbatch"):
        markers.Archive.from_json({"format": 2, "applied": [], "live": []})


def test_a_batch_only_the_archive_ranges_name_is_applied():
    """Batch 9 replayed output 3 and was replaced by batch 12: no live marker, still applied."""
    archive = markers.fold(None, HISTORY, HISTORY[-1].snapshot_id)
    found = markers.applied_in(archive, list(markers.combined(archive, [])), 9)
    assert found is not None and found.batch_id == 9 and found.snapshot_id == HISTORY[-1].snapshot_id
    assert markers.applied_in(archive, [], 99) is None


class _Table:
    """What ``markers.history`` reads of a pyiceberg table: the ancestry, the archive property and
    the archive file through ``io``."""

    def __init__(self, published: list[markers.Published], files: dict[str, bytes], ref: dict | None = None):
        from pyiceberg.table.snapshots import Operation, Snapshot, Summary

        self.snapshots = [Snapshot(snapshot_id=m.snapshot_id, parent_snapshot_id=prev.snapshot_id if prev else None,
                                   sequence_number=m.snapshot_id, timestamp_ms=m.snapshot_id, manifest_list="x",
                                   summary=Summary(Operation.OVERWRITE, **m.props))
                          for prev, m in zip([None, *published], published)]
        by_id = {s.snapshot_id: s for s in self.snapshots}
        self.metadata = SimpleNamespace(snapshot_by_id=by_id.get)
        self.properties = {markers.ARCHIVE_PROPERTY: json.dumps(ref)} if ref else {}
        self.io = SimpleNamespace(new_input=lambda path: SimpleNamespace(open=lambda: io.BytesIO(files[path])))

    def current_snapshot(self):
        return self.snapshots[-1] if self.snapshots else None

    def name(self) -> tuple[str, str]:
        return ("ns", "t")


@pytest.mark.parametrize("k", [1, 5, 9, 12, len(HISTORY) - 1])
@pytest.mark.parametrize("expired", [True, False], ids=["expired", "killed-before-expiry"])
def test_a_table_reads_the_same_markers_before_and_after_its_oldest_snapshots_go(k, expired):
    whole = _Table(HISTORY, {})
    path = f"mem://metadata/offsetbatch-markers-{k}-{expired}.json.gz"
    archive = markers.fold(None, HISTORY[:k], HISTORY[k - 1].snapshot_id)
    ref = {"path": path, "through_snapshot_id": HISTORY[k - 1].snapshot_id, "n": 1,
           "applied": [list(r) for r in archive.applied]}  # as maintenance commits it
    after = _Table(HISTORY[k:] if expired else HISTORY, {path: markers.encode(archive)}, ref)
    assert _view(markers.live(after)) == _view(markers.live(whole))
    for batch_id in range(0, 15):
        assert (markers.applied(after, batch_id) is None) == (markers.applied(whole, batch_id) is None), batch_id
    assert len(list(markers.history(after))) <= len(list(markers.history(whole)))


def test_applied_reads_the_property_not_the_archive_file():
    """Every publish asks ``applied``; the archive file grows with the table's history."""
    archive = markers.fold(None, HISTORY[:5], HISTORY[4].snapshot_id)
    ref = {"path": "mem://never-read.json.gz", "through_snapshot_id": HISTORY[4].snapshot_id, "n": 1,
           "applied": [list(r) for r in archive.applied]}
    table = _Table(HISTORY[5:], {}, ref)  # no file: reading it would raise
    assert all(markers.applied(table, m.batch_id) is not None for m in HISTORY if m.batch_id is not None)
    assert markers.applied(table, 999) is None


def test_a_missing_archive_names_the_table_and_what_to_do_and_is_not_retried():
    ref = {"path": "mem://gone.json.gz", "through_snapshot_id": 1, "n": 1}

    def missing(path):
        raise FileNotFoundError(path)
    table = _Table(HISTORY[3:], {}, ref)
    table.io = SimpleNamespace(new_input=lambda path: SimpleNamespace(open=lambda: missing(path)))
    with pytest.raises(MarkersArchiveMissingError, match=r"Iceberg table ns\.t: its markers archive "
                                                         r"mem://gone.json.gz .* Restore the file") as raised:
        markers.live(table)
    assert is_permanent(raised.value)  # the maintenance and commit tasks fail at once, without retries
