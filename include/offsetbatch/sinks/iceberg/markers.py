"""What an Iceberg snapshot says about the batch it published: its summary properties, the proof
that a batch is in the table (so a rolled-forward commit never adds it twice) and what a ledger
rebuild reads.

    offsetbatch.pipeline     pipeline name
    offsetbatch.batch-id     the ledger's batch (a replay has its own id)
    offsetbatch.output-id    whose output the snapshot holds (a replay: its target's)
    offsetbatch.kind         incremental | backfill | replay | ...
    offsetbatch.attempt      the Spark attempt whose files were added
    offsetbatch.retired      output ids whose rows this snapshot removed (superseded by a rewind)
    offsetbatch.ranges       JSON: [{topic, partition, from_offset, until_offset, rows, rejected, ...}]
    offsetbatch.rows-in / rows-out / rows-rejected / bytes-in / job-seconds

Only snapshots in the current snapshot's ancestry count: a snapshot of a rolled-back branch
published nothing readers see.

**The archive** (what survives snapshot expiry, ``sinks/iceberg/maintenance.py``). Before
maintenance expires snapshots it folds their markers into a gzip JSON file under the table's
``metadata/`` folder, named by the table property ``offsetbatch.markers-archive`` (``{"path",
"through_snapshot_id", "n", "applied"}``): the batch ids ever applied (as ranges, in the property
too) and the live map, output id -> the marker whose rows the table holds (``retired`` already
applied, so archived markers retire nothing). ``history`` is the archive's live markers, then the
markers of the current ancestry after ``through_snapshot_id`` (those up to it are in the archive
when a pass was killed between the property and the expiry); ``applied`` finds a batch only the
archive names from the property's ranges, without reading the file. So every reader gives the same
answers before and after an expiry, and metadata.json stays bounded.
"""

from __future__ import annotations

import bisect
import gzip
import json
import threading
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Iterable, Iterator

from offsetbatch.jobspec import Manifest, RangeReport

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

PREFIX = "offsetbatch."
ARCHIVE_PROPERTY = f"{PREFIX}markers-archive"
ARCHIVE_FORMAT = 1


def retirement(name: str, retired: list[int]) -> dict[str, str]:
    """The summary of a snapshot that only removes superseded output."""
    return {f"{PREFIX}pipeline": name, f"{PREFIX}retired": ",".join(str(i) for i in retired)}


def summary(name: str, batch_id: int, output_id: int, kind: str, manifest: Manifest,
            retired: list[int]) -> dict[str, str]:
    return {
        f"{PREFIX}pipeline": name, f"{PREFIX}batch-id": str(batch_id), f"{PREFIX}output-id": str(output_id),
        f"{PREFIX}kind": kind, f"{PREFIX}attempt": manifest.attempt or "",
        f"{PREFIX}retired": ",".join(str(i) for i in retired),
        f"{PREFIX}ranges": json.dumps([asdict(r) for r in manifest.ranges], separators=(",", ":")),
        f"{PREFIX}rows-in": str(manifest.rows_in), f"{PREFIX}rows-out": str(manifest.rows_out),
        f"{PREFIX}rows-rejected": str(manifest.rows_rejected), f"{PREFIX}bytes-in": str(manifest.bytes_in),
        f"{PREFIX}job-seconds": str(manifest.job_seconds),
    }


@dataclass(frozen=True)
class Published:
    """One snapshot's marker."""

    snapshot_id: int
    pipeline: str
    batch_id: int | None  # None: a snapshot that only retired output (``IcebergSink.retire``)
    output_id: int | None
    kind: str
    attempt: str
    retired: tuple[int, ...]
    props: dict

    @property
    def ranges(self) -> list[RangeReport]:
        return [RangeReport(**r) for r in json.loads(self.props.get(f"{PREFIX}ranges", "[]"))]

    def manifest(self) -> Manifest:
        p = self.props
        return Manifest(pipeline=self.pipeline, output_id=self.output_id, ranges=self.ranges,
                        rows_in=int(p.get(f"{PREFIX}rows-in", 0)), rows_out=int(p.get(f"{PREFIX}rows-out", 0)),
                        rows_rejected=int(p.get(f"{PREFIX}rows-rejected", 0)),
                        bytes_in=int(p.get(f"{PREFIX}bytes-in", 0)),
                        data_files=[], rejected_files=[], job_seconds=float(p.get(f"{PREFIX}job-seconds", 0)),
                        spark_version="", attempt=self.attempt)


def marker_of(snapshot: "Snapshot") -> Published | None:
    props = dict(snapshot.summary.additional_properties) if snapshot.summary else {}
    if f"{PREFIX}pipeline" not in props:
        return None
    retired = tuple(int(i) for i in props.get(f"{PREFIX}retired", "").split(",") if i)
    ids = [int(props[k]) if props.get(k) else None for k in (f"{PREFIX}batch-id", f"{PREFIX}output-id")]
    return Published(snapshot.snapshot_id, props[f"{PREFIX}pipeline"], ids[0], ids[1], props.get(f"{PREFIX}kind", ""),
                     props.get(f"{PREFIX}attempt", ""), retired, props)


@dataclass(frozen=True)
class Archive:
    """The markers of expired snapshots, folded (module docstring, *The archive*)."""

    through_snapshot_id: int | None = None
    applied: tuple[tuple[int, int], ...] = ()  # batch ids, as sorted inclusive ranges
    live: dict[int, Published] = field(default_factory=dict)  # output id -> marker, in folding order

    def has_applied(self, batch_id: int) -> bool:
        i = bisect.bisect_right(self.applied, (batch_id, float("inf"))) - 1
        return i >= 0 and self.applied[i][0] <= batch_id <= self.applied[i][1]

    def to_json(self) -> dict:
        return {"format": ARCHIVE_FORMAT, "through_snapshot_id": self.through_snapshot_id,
                "applied": [list(r) for r in self.applied],
                "live": [{"snapshot_id": m.snapshot_id, "pipeline": m.pipeline, "batch_id": m.batch_id,
                          "output_id": m.output_id, "kind": m.kind, "attempt": m.attempt, "props": m.props}
                         for m in self.live.values()]}

    @classmethod
    def from_json(cls, doc: dict) -> "Archive":
        if doc.get("format") != ARCHIVE_FORMAT:
            raise ValueError(f"markers archive format {doc.get('format')!r} is not {ARCHIVE_FORMAT}: written by a "
                             f"newer offsetbatch; upgrade this one")
        live = {m["output_id"]: Published(m["snapshot_id"], m["pipeline"], m["batch_id"], m["output_id"], m["kind"],
                                          m["attempt"], (), m["props"]) for m in doc["live"]}
        return cls(doc.get("through_snapshot_id"), tuple(tuple(r) for r in doc["applied"]), live)


def ranges_of(ids: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """Sorted ids as inclusive ranges: a year of hourly batches is one range."""
    out: list[list[int]] = []
    for i in sorted(set(ids)):
        if out and i == out[-1][1] + 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return tuple((lo, hi) for lo, hi in out)


def fold(archive: Archive | None, going: list[Published], through_snapshot_id: int) -> Archive:
    """``archive`` with the markers of the snapshots about to expire (oldest first) folded in."""
    archive = archive or Archive()
    live = dict(archive.live)
    applied = {i for lo, hi in archive.applied for i in range(lo, hi + 1)}
    for marker in going:
        for old in marker.retired:
            live.pop(old, None)
        if marker.batch_id is not None:
            applied.add(marker.batch_id)
        if marker.output_id is not None:
            live.pop(marker.output_id, None)  # re-inserted last: the folding order stays the publishing order
            props = {k: v for k, v in marker.props.items() if k != f"{PREFIX}retired"}
            live[marker.output_id] = replace(marker, retired=(), props=props)
    return Archive(through_snapshot_id, ranges_of(applied), live)


def encode(archive: Archive) -> bytes:
    return gzip.compress(json.dumps(archive.to_json(), separators=(",", ":")).encode(), mtime=0)


def decode(data: bytes) -> Archive:
    return Archive.from_json(json.loads(gzip.decompress(data)))


# table -> (path, archive), the latest only: a file is written once under a new name, never changed,
# and a pass names a new one (a long-lived process, the UI's, keeps one archive per table)
_archives: dict[str, tuple[str, Archive]] = {}
_archives_lock = threading.Lock()


def archive_ref(table: "Table") -> dict | None:
    """The table property naming the current archive: ``{"path", "through_snapshot_id", "n",
    "applied"}`` (``applied``: the archive's applied batch ids as ranges, so ``applied`` reads no file)."""
    value = table.properties.get(ARCHIVE_PROPERTY)
    return json.loads(value) if value else None


def archive_of(table: "Table") -> Archive | None:
    """The table's archive (read once per process and path; the table's previous one is dropped)."""
    ref = archive_ref(table)
    if ref is None:
        return None
    path, key = ref["path"], ".".join(table.name())
    with _archives_lock:
        cached = _archives.get(key)
        if cached is not None and cached[0] == path:
            return cached[1]
    try:
        with table.io.new_input(path).open() as f:
            archive = decode(f.read())
    except FileNotFoundError as exc:
        from offsetbatch.errors import MarkersArchiveMissingError

        raise MarkersArchiveMissingError(
            f"Iceberg table {'.'.join(table.name())}: its markers archive {path} (table property {ARCHIVE_PROPERTY}) "
            f"is missing, so which batches the expired snapshots published is unknown. Restore the file from a "
            f"backup; do not publish or rebuild the ledger until then") from exc
    with _archives_lock:
        _archives[key] = (path, archive)
    return archive


def ancestry(table: "Table") -> list["Snapshot"]:
    """The current snapshot's ancestry, oldest first."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    return list(reversed(list(ancestors_of(current, table.metadata)))) if current else []


def after_archive(chain: list["Snapshot"], archive: Archive | None) -> list["Snapshot"]:
    """The snapshots of ``chain`` the archive does not hold: those after its ``through_snapshot_id``
    (all of them when that snapshot is expired)."""
    through = archive.through_snapshot_id if archive else None
    ids = [s.snapshot_id for s in chain]
    return chain[ids.index(through) + 1:] if through in ids else chain


def combined(archive: Archive | None, retained: Iterable[Published]) -> Iterator[Published]:
    """The archive's live markers, then the retained ones: what ``history`` yields."""
    if archive is not None:
        yield from archive.live.values()
    yield from retained


def history(table: "Table") -> Iterator[Published]:
    """Markers of the archive and the current snapshot's ancestry, oldest first."""
    archive = archive_of(table)
    retained = (m for m in map(marker_of, after_archive(ancestry(table), archive)) if m is not None)
    yield from combined(archive, retained)


def live_of(history_: Iterable[Published]) -> dict[int, Published]:
    """Output id -> the marker whose rows the table holds, replaying ``history_``."""
    out: dict[int, Published] = {}
    for marker in history_:
        for old in marker.retired:
            out.pop(old, None)
        if marker.output_id is not None:
            out[marker.output_id] = marker
    return out


def applied_in(archive: Archive | None, history_: Iterable[Published], batch_id: int) -> Published | None:
    """The marker of ``batch_id`` in ``history_``; else, when only the archive's ranges name it (its
    output was replaced or retired since), a marker standing for the archive."""
    for marker in history_:
        if marker.batch_id == batch_id:
            return marker
    if archive is not None and archive.has_applied(batch_id):
        return Published(archive.through_snapshot_id or 0, "", batch_id, None, "archived", "", (), {})
    return None


def live(table: "Table") -> dict[int, Published]:
    """Output id -> the marker of the snapshot whose rows the table holds for it now."""
    return live_of(history(table))


def applied(table: "Table", batch_id: int) -> Published | None:
    """The snapshot that published ledger batch ``batch_id``, if the table has it (or had it, before
    an expiry: the archive's ranges of applied ids, which its table property carries). Every publish
    asks this, so it never reads the archive file, whose live map grows with the table's history
    (4.3 MiB gzipped, 121 MiB parsed, at 100,000 batches of 4 partitions)."""
    ref = archive_ref(table) or {}
    stub = Archive(ref.get("through_snapshot_id"), tuple(tuple(r) for r in ref.get("applied", ())))
    retained = (m for m in map(marker_of, after_archive(ancestry(table), stub)) if m is not None)
    return applied_in(stub, retained, batch_id)
