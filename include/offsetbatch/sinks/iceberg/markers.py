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
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Iterator

from offsetbatch.jobspec import Manifest, RangeReport

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

PREFIX = "offsetbatch."


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


def _marker(snapshot: "Snapshot") -> Published | None:
    props = dict(snapshot.summary.additional_properties) if snapshot.summary else {}
    if f"{PREFIX}pipeline" not in props:
        return None
    retired = tuple(int(i) for i in props.get(f"{PREFIX}retired", "").split(",") if i)
    ids = [int(props[k]) if props.get(k) else None for k in (f"{PREFIX}batch-id", f"{PREFIX}output-id")]
    return Published(snapshot.snapshot_id, props[f"{PREFIX}pipeline"], ids[0], ids[1], props.get(f"{PREFIX}kind", ""),
                     props.get(f"{PREFIX}attempt", ""), retired, props)


def history(table: "Table") -> Iterator[Published]:
    """Markers of the current snapshot's ancestry, oldest first."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    chain = list(ancestors_of(current, table.metadata)) if current else []
    for snapshot in reversed(chain):
        marker = _marker(snapshot)
        if marker is not None:
            yield marker


def live(table: "Table") -> dict[int, Published]:
    """Output id -> the marker of the snapshot whose rows the table holds for it now."""
    out: dict[int, Published] = {}
    for marker in history(table):
        for old in marker.retired:
            out.pop(old, None)
        if marker.output_id is not None:
            out[marker.output_id] = marker
    return out


def applied(table: "Table", batch_id: int) -> Published | None:
    """The snapshot that published ledger batch ``batch_id``, if the table has it."""
    for marker in history(table):
        if marker.batch_id == batch_id:
            return marker
    return None
