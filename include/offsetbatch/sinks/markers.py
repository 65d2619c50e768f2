"""The per-batch marker a table-format sink writes with each commit, and the archive that keeps
markers once the table's own history of them is cut (Iceberg's snapshot expiry, Delta's log
cleanup). The keys, in an Iceberg snapshot's summary or a Delta commit's ``commitInfo``:

    offsetbatch.pipeline     pipeline name
    offsetbatch.batch-id     the ledger's batch (a replay has its own id)
    offsetbatch.output-id    whose output the commit holds (a replay: its target's)
    offsetbatch.kind         incremental | backfill | replay | ...
    offsetbatch.attempt      the Spark attempt whose files were added
    offsetbatch.retired      output ids whose rows this commit removed (superseded by a rewind)
    offsetbatch.ranges       JSON: [{topic, partition, from_offset, until_offset, rows, rejected, ...}]
    offsetbatch.rows-in / rows-out / rows-rejected / bytes-in / job-seconds

Replaying the markers of a table's history, oldest first, gives what it holds (``live_of``) and
which batches it ever applied (``applied_in``); ``fold`` carries both into an ``Archive`` before the
history that named them is cut, so every reader gives the same answers before and after. Where a
sink keeps its archive, and how it orders its history, is the sink's (``sinks.iceberg.markers``,
``sinks.delta.markers``).
"""

from __future__ import annotations

import bisect
import gzip
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Iterable, Iterator

from offsetbatch.jobspec import Manifest, RangeReport

PREFIX = "offsetbatch."
ARCHIVE_FORMAT = 1


def retirement(name: str, retired: list[int]) -> dict[str, str]:
    """The marker of a commit that only removes superseded output."""
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
    """One commit's marker."""

    snapshot_id: int  # the Iceberg snapshot, or the Delta table version, that carries it
    pipeline: str
    batch_id: int | None  # None: a commit that only retired output (a sink's ``retire``)
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



def marker_of(commit_id: int, props: dict) -> Published | None:
    """The marker in a commit's properties (``None``: a commit that is not a batch's, such as a
    compaction)."""
    if f"{PREFIX}pipeline" not in props:
        return None
    retired = tuple(int(i) for i in props.get(f"{PREFIX}retired", "").split(",") if i)
    ids = [int(props[k]) if props.get(k) else None for k in (f"{PREFIX}batch-id", f"{PREFIX}output-id")]
    return Published(commit_id, props[f"{PREFIX}pipeline"], ids[0], ids[1], props.get(f"{PREFIX}kind", ""),
                     props.get(f"{PREFIX}attempt", ""), retired, props)


@dataclass(frozen=True)
class Archive:
    """The markers of commits whose history was cut, folded (``fold``)."""

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



def combined(archive: Archive | None, retained: Iterable[Published]) -> Iterator[Published]:
    """The archive's live markers, then the retained ones: what ``history`` yields."""
    if archive is not None:
        yield from archive.live.values()
    yield from retained



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
