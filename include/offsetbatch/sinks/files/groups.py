"""A member leaves its group: a replay or retirement of a compacted batch rewrites the group's
files without its rows (``leave_group``, called by ``FilesSink.publish`` and ``retire``)."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Iterable

from offsetbatch import faults, storage
from offsetbatch.sinks.files.intents import Intent, carry_out, write_intent
from offsetbatch.sinks.files.layout import (GROUP_LEFT, GROUP_SWAPPING, CompactionLayout, FilesTable,
                                            GroupManifest, local_path, now_iso,
                                            partition_of)

log = logging.getLogger(__package__)


def group_of(sink: FilesTable, output_id: int) -> int | None:
    """The group whose folder holds ``output_id``'s rows, or whose folder has its id."""
    layout = CompactionLayout(sink.layout.meta)
    pointer = storage.read_json_if_exists(layout.member(output_id))
    if pointer is not None:
        return int(pointer["group"])
    return output_id if storage.exists(layout.group(output_id)) else None


def is_group_folder(sink: FilesTable, output_id: int) -> bool:
    return storage.exists(CompactionLayout(sink.layout.meta).group(output_id))


def leave_group(sink: FilesTable, output_id: int, attempt: str | None = None, joining: str | None = None,
                ranges: list[dict] | None = None) -> bool:
    """Take ``output_id``'s rows out of its group folder. ``joining``: a staged data folder whose
    files become ``output_id``'s rows in the group (its id is the group's); ``attempt``: the attempt
    being published (already in the group: nothing to do). Whether anything changed."""
    layout = CompactionLayout(sink.layout.meta)
    g = group_of(sink, output_id)
    if g is None:
        return False
    group = GroupManifest.load_if_exists(layout.group(g))
    if group is None:  # a pointer left by a killed swap finish_pending already completed
        storage.remove(layout.member(output_id))
        return False
    if attempt is not None and output_id in group.members and group.attempts.get(str(output_id)) == attempt:
        return False  # this attempt is the one in the group: a roll-forward of a publish that got this far
    if output_id not in group.members and not (joining and output_id == g):
        storage.remove(layout.member(output_id))
        return False  # its rows left already
    stamp = time.time_ns()
    staged, trash = layout.staged(g, stamp), layout.trash(g, stamp)
    data = sink.layout.data(g)
    moves, files = _without_member(group, output_id, data, staged, trash, stamp)
    joined = _joining_files(joining, output_id, data, stamp) if joining and output_id == g else []
    for src, dst, rows in joined:
        moves.append([src, dst])
        files[dst[len(data) + 1:]] = [[output_id, 0, rows]]
    members = [m for m in group.members if m != output_id] + ([output_id] if joined else [])
    manifest = _regrouped(group, sorted(members), files, output_id, attempt if joined else None, ranges)
    cleanup = ([joining] if joining and output_id == g else []) + ([] if manifest else [data])
    intent = Intent(g, f"{'replay' if joining else 'retirement'} of batch {output_id}", moves,
                    asdict(manifest) if manifest else None,
                    set_members=[output_id] if joined else [],
                    drop_members=[] if joined else [output_id], cleanup=cleanup, trash=trash)
    write_intent(layout, intent)
    carry_out(layout, intent, GROUP_SWAPPING)
    log.info("%s: took batch %d's %d rows out of group %d's folder%s", sink.where(output_id), output_id,
             group.rows_of(output_id), g, " and put its new output in it" if joined else "")
    faults.checkpoint(GROUP_LEFT)
    return True


def _without_member(group: GroupManifest, member: int, data: str, staged: str, trash: str,
                    stamp: int) -> tuple[list[list[str]], dict[str, list[list[int]]]]:
    """On a disk: the moves that swap in the group's files without ``member``'s rows (rewritten
    under ``staged``), and the group's files after."""
    moves: list[list[str]] = []
    files = {rel: spans for rel, spans in group.files.items() if not any(m == member for m, _, _ in spans)}
    for rel, (new_rel, spans) in rewrite_without(group, member, data, staged, stamp).items():
        moves.append([f"{data}/{rel}", f"{trash}/{rel}"])
        if new_rel is not None:
            moves.append([f"{staged}/{new_rel}", f"{data}/{new_rel}"])
            files[new_rel] = spans
    return moves, files


def rewrite_without(group: GroupManifest, member: int, base: str, out: str,
                    stamp: int) -> dict[str, tuple[str | None, list[list[int]]]]:
    """Each of the group's files holding ``member``'s rows (``base``/its key), rewritten under
    ``out`` without them: its key -> (the new file's path under ``out``, or ``None`` when no other
    member's rows were in it; the new file's spans)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    replaced: dict[str, tuple[str | None, list[list[int]]]] = {}
    for k, (rel, spans) in enumerate(sorted(group.files.items())):
        if not any(m == member for m, _, _ in spans):
            continue
        keep = [s for s in spans if s[0] != member and s[2] > s[1]]
        if not keep:
            replaced[rel] = (None, [])
            continue
        table = storage.read_parquet(f"{base}/{rel}")
        parts, new_spans, at = [], [], 0
        for m, start, end in keep:
            parts.append(table.slice(start, end - start))
            new_spans.append([m, at, at + end - start])
            at += end - start
        partition = partition_of(rel)
        new_rel = f"{partition}/" if partition else ""
        new_rel += f"part-compacted-{stamp}-r{k:05d}.parquet"
        with storage.open_write(f"{out}/{new_rel}") as f:
            pq.write_table(pa.concat_tables(parts), f, compression="snappy")
        replaced[rel] = (new_rel, new_spans)
    return replaced


def _joining_files(joining: str, member: int, data: str, stamp: int) -> list[tuple[str, str, int]]:
    """(source, target in the group folder, rows) of each non-empty Parquet file of ``joining``."""
    found = []
    base = local_path(joining)
    for uri in storage.files(joining):
        rows = storage.parquet_rows(uri)
        if not rows:
            continue
        rel = uri[len(base) + 1:]
        folder, name = (rel.rsplit("/", 1) if "/" in rel else ("", rel))
        target = f"{folder}/part-replay-{member}-{stamp}-{name}" if folder else f"part-replay-{member}-{stamp}-{name}"
        found.append((uri, f"{data}/{target}", rows))
    return found


def _regrouped(group: GroupManifest, members: list[int], files: dict[str, list[list[int]]], member: int,
               attempt: str | None, ranges: list[dict] | None) -> GroupManifest | None:
    if not files:
        return None
    attempts = {k: v for k, v in group.attempts.items() if int(k) in members}
    kept_ranges = {k: v for k, v in group.ranges.items() if int(k) in members}
    if member in members:
        attempts[str(member)] = attempt
        kept_ranges[str(member)] = ranges or []
    return GroupManifest(group.group, members, files, attempts, kept_ranges, group.day, now_iso())


def members_of(groups: Iterable[GroupManifest]) -> dict[int, int]:
    """member -> group, of the given group manifests (tests and tools)."""
    return {m: g.group for g in groups for m in g.members}
