"""Compaction: which closed days' batches form a group (``plan_groups``), and the group's folder
written and swapped in (``compact``)."""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from datetime import date, timezone

from offsetbatch import faults, storage
from offsetbatch.jobspec import Manifest
from offsetbatch.sinks.files.intents import Intent, carry_out, finish_pending, write_intent
from offsetbatch.sinks.files.layout import (COMPACTION_STAGED, COMPACTION_SWAPPING, CompactionLayout,
                                            FilesTable, GroupManifest, day_of, local_path, mib, mtime,
                                            now_iso, output_ids, root_relative, utc)
from offsetbatch.sinks.maintenance import Horizon, MaintenanceSettings

log = logging.getLogger(__package__)


@dataclass(frozen=True)
class InputFile:
    member: int
    partition: str  # "event_date=D", or "" for the batch folder itself
    uri: str
    size: int


@dataclass
class GroupPlan:
    """One closed day's published, uncompacted batches, and their files per partition."""

    day: date
    members: list[int]
    files: list[InputFile]
    manifests: dict[int, Manifest]

    @property
    def group(self) -> int:
        return self.members[0]

    def partitions(self) -> dict[str, list[InputFile]]:
        found: dict[str, list[InputFile]] = defaultdict(list)
        for f in self.files:
            found[f.partition].append(f)
        return found

    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    def files_after(self, target: int) -> int:
        """At most this many files once compacted (one per started target size per partition)."""
        return sum(max(1, math.ceil(sum(f.size for f in fs) / target)) for fs in self.partitions().values())


def _files_of(sink: FilesTable, output_id: int) -> list[InputFile]:
    folder = sink.layout.data(output_id)
    found = []
    for uri in storage.files(folder):
        rel = uri[len(local_path(folder)) + 1:]
        partition = rel.rsplit("/", 1)[0] if "/" in rel else ""
        found.append(InputFile(output_id, partition, uri, storage.info(uri)[0]))
    return found


def _named_files(output_id: int, manifest: Manifest) -> list[InputFile]:
    """On an object store: the files a batch's manifest names (in its attempt's ``data/``)."""
    base = f"{manifest.location}/data/"
    found = []
    for uri in manifest.data_files:
        rel = uri[len(base):] if uri.startswith(base) else uri.rsplit("/", 1)[-1]
        found.append(InputFile(output_id, rel.rsplit("/", 1)[0] if "/" in rel else "", uri, storage.info(uri)[0]))
    return found


def plan_groups(sink: FilesTable, policy: MaintenanceSettings, horizon: Horizon) -> list[GroupPlan]:
    """The groups a pass would compact now: changes nothing. Compacted members and group ids are
    known from two listings, and a manifest is read only when its batch joins a group, so a pass
    over a year of batches costs a stat per uncompacted batch."""
    layout = CompactionLayout(sink.layout.meta)
    today = utc(horizon.now).astimezone(timezone.utc).date()
    done = output_ids(storage.children(f"{layout.base}/members")) | output_ids(storage.children(layout.base))
    by_day: dict[date, list[int]] = defaultdict(list)
    for output_id in sorted(output_ids(storage.children(f"{sink.layout.meta}/manifests"))):
        uri = sink.layout.manifest(output_id)
        if output_id in done or not (sink.in_place or storage.exists(sink.layout.data(output_id))):
            continue  # compacted already, a group folder's id, or (on a disk) a batch of no records
        day = day_of(mtime(uri))
        if day < today:
            by_day[day].append(output_id)
    plans = []
    for day, members in sorted(by_day.items()):
        members.sort()
        manifests = {m: Manifest.load(sink.layout.manifest(m)) for m in members} if sink.in_place else {}
        if sink.in_place:  # a batch of no records names no file
            members = [m for m in members if manifests[m].data_files]
        files = [f for m in members for f in (_named_files(m, manifests[m]) if sink.in_place else _files_of(sink, m))]
        small = sum(1 for f in files if f.size < policy.target_file_size)
        if small >= policy.min_input_files:
            manifests = manifests or {m: Manifest.load(sink.layout.manifest(m)) for m in members}
            plans.append(GroupPlan(day, members, files, manifests))
    return plans


# ---- writing a compacted folder ------------------------------------------------------------

ROW_GROUP_BYTES = 32 * 1024 * 1024  # input bytes buffered per row group (bounds the memory a pass needs)


class _PartitionWriter:
    """Writes one partition's rows into files of about ``target`` bytes (counted as the input
    files' sizes), noting each member's row span in each file; a schema change starts a new file.
    Members' rows are buffered into row groups of up to ``ROW_GROUP_BYTES``: a row group per
    minute batch would keep the small-file cost inside the big file."""

    def __init__(self, folder: str, partition: str, stamp: int, target: int):
        self.folder, self.partition, self.stamp, self.target = folder, partition, stamp, target
        self.spans: dict[str, list[list[int]]] = {}
        self._writer = None
        self._files = ExitStack()  # the open output file
        self._rel = ""
        self._bytes = self._rows = 0
        self._count = 0
        self._buffer: list = []
        self._buffered = 0

    def _rel_name(self, name: str) -> str:
        return f"{self.partition}/{name}" if self.partition else name

    def _open(self, schema) -> None:
        import pyarrow.parquet as pq

        self._rel = self._rel_name(f"part-compacted-{self.stamp}-{self._count:05d}.parquet")
        self._count += 1
        out = self._files.enter_context(storage.open_write(f"{self.folder}/{self._rel}"))
        self._writer = pq.ParquetWriter(out, schema, compression="snappy")
        self._bytes = self._rows = 0
        self.spans[self._rel] = []

    def _flush(self) -> None:
        import pyarrow as pa

        if self._buffer:
            self._writer.write_table(pa.concat_tables(self._buffer))
            self._buffer, self._buffered = [], 0

    def close(self) -> None:
        if self._writer is not None:
            self._flush()
            self._writer.close()
            self._writer = None
            self._files.close()

    def add(self, member: int, table, size: int) -> None:
        if self._writer is not None and (self._bytes >= self.target or not table.schema.equals(self._writer.schema,
                                                                                              check_metadata=False)):
            self.close()
        if self._writer is None:
            self._open(table.schema)
        self._buffer.append(table)
        self._buffered += size
        if self._buffered >= ROW_GROUP_BYTES:
            self._flush()
        spans = self.spans[self._rel]
        if spans and spans[-1][0] == member and spans[-1][2] == self._rows:
            spans[-1][2] += table.num_rows
        else:
            spans.append([member, self._rows, self._rows + table.num_rows])
        self._rows += table.num_rows
        self._bytes += size


def _unified(uris: list[str]):
    """One schema for a partition's files (a column a batch added reads as null in the others'
    rows, as a merged-schema read shows them), or ``None`` when their types disagree: each
    schema then gets files of its own."""
    import pyarrow as pa

    schemas = [storage.parquet_schema(u) for u in uris]
    try:
        unified = pa.unify_schemas(schemas) if schemas else None
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    # a writer's own metadata (Spark's row schema) only where it describes these very columns
    same = next((s for s in schemas if s.equals(unified, check_metadata=False)), None) if unified else None
    if unified is None:
        return None
    return unified.with_metadata(same.metadata or {}) if same is not None else unified.remove_metadata()


def _conform(table, schema):
    """``table`` with ``schema``'s columns, in its order (missing ones null)."""
    import pyarrow as pa

    if schema is None or table.schema.equals(schema, check_metadata=False):
        return table
    columns = [table[f.name] if f.name in table.column_names else pa.nulls(table.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _write_group(plan: GroupPlan, out: str, stamp: int,
                 target: int) -> tuple[dict[str, list[list[int]]], list[tuple[InputFile, str, int]]]:
    """Write the group's compacted files under ``out``; return their spans (relative to ``out``),
    and the files of at least ``target`` bytes carried over unchanged: (file, its name in the
    group's folder, rows)."""
    spans: dict[str, list[list[int]]] = {}
    carried: list[tuple[InputFile, str, int]] = []
    for partition, files in sorted(plan.partitions().items()):
        writer = _PartitionWriter(out, partition, stamp, target)
        schema = _unified([f.uri for f in files if f.size < target])
        try:
            for f in files:
                if f.size >= target:
                    name = f"part-carried-{f.member}-{f.uri.rsplit('/', 1)[-1]}"
                    rows = storage.parquet_rows(f.uri)
                    if rows:
                        carried.append((f, f"{partition}/{name}" if partition else name, rows))
                    continue
                table = _conform(storage.read_parquet(f.uri), schema)
                if table.num_rows:
                    writer.add(f.member, table, f.size)
        finally:
            writer.close()
        spans.update(writer.spans)
    return spans, carried


def compact(sink: FilesTable, policy: MaintenanceSettings, horizon: Horizon, day: date) -> dict[str, int]:
    """Compact ``day``'s group as it is now (re-read: a replay may have changed it since planning)."""
    layout = CompactionLayout(sink.layout.meta)
    finish_pending(sink)
    plan = next((p for p in plan_groups(sink, policy, horizon) if p.day == day), None)
    if plan is None:
        log.info("%s: nothing to compact on %s any more", sink.where(), day)
        return {"groups": 0}
    g, stamp = plan.group, time.time_ns()
    out = layout.files(g, stamp) if sink.in_place else layout.staged(g, stamp)
    spans, carried = _write_group(plan, out, stamp, policy.target_file_size)
    faults.checkpoint(COMPACTION_STAGED)
    manifest = GroupManifest(
        group=g, members=plan.members, files=spans,
        attempts={str(m): plan.manifests[m].attempt for m in plan.members},
        ranges={str(m): [asdict(r) for r in plan.manifests[m].ranges] for m in plan.members},
        day=day.isoformat(), updated_at=now_iso(), in_place=sink.in_place)
    intent = (_published_in_place if sink.in_place else _swapped_in)(sink, layout, plan, manifest, out, carried, stamp)
    write_intent(layout, intent)
    carry_out(layout, intent, COMPACTION_SWAPPING)
    after = len(manifest.files)
    log.info("%s: compacted %s: %d batches (%d..%d), %d files (%s) into %d in batch_id=%d",
             sink.where(g), day, len(plan.members), plan.members[0], plan.members[-1], len(plan.files),
             mib(plan.bytes()), after, g)
    return {"groups": 1, "batches": len(plan.members), "files_before": len(plan.files), "files_after": after,
            "bytes_before": plan.bytes()}


def _swapped_in(sink: FilesTable, layout: CompactionLayout, plan: GroupPlan, manifest: GroupManifest, staged: str,
                carried: list[tuple[InputFile, str, int]], stamp: int) -> Intent:
    """On a disk: the members' folders go to the trash, the files carried over come back from
    there, and the staged folder becomes ``batch_id=G``."""
    trash = layout.trash(plan.group, stamp)
    moves = [[sink.layout.data(m), f"{trash}/batch_id={m}"] for m in plan.members]
    for f, rel, rows in carried:
        manifest.files[rel] = [[f.member, 0, rows]]
        moves.append([f"{trash}/batch_id={f.member}{f.uri[len(local_path(sink.layout.data(f.member))):]}",
                      f"{staged}/{rel}"])
    moves.append([staged, sink.layout.data(plan.group)])
    return Intent(plan.group, "compaction", moves, asdict(manifest), set_members=plan.members, trash=trash)


def _published_in_place(sink: FilesTable, layout: CompactionLayout, plan: GroupPlan, manifest: GroupManifest,
                        out: str, carried: list[tuple[InputFile, str, int]], stamp: int) -> Intent:
    """On an object store nothing moves: the group manifest (one PUT) names the written files and
    the carried ones where they are, and the members' small files expire after the grace."""
    files = {root_relative(sink, f"{out}/{rel}"): spans for rel, spans in manifest.files.items()}
    files.update({root_relative(sink, f.uri): [[f.member, 0, rows]] for f, _, rows in carried})
    manifest.files = files
    kept = {f.uri for f, _, _ in carried}
    return Intent(plan.group, "compaction", [], asdict(manifest), set_members=plan.members,
                  expire=[f.uri for f in plan.files if f.uri not in kept],
                  expire_note=layout.expiry_note(plan.group, stamp))

