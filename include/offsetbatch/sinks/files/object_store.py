"""Groups on an object store, where nothing is renamed and a group manifest (one PUT) is what
readers follow: a compacted member's replay puts its new rows into its group, its retirement takes
them out, each written down first as an intent, as on a disk.

Readers (``FilesSink.read_committed``, any reader of the documented layout) list the group
manifests first, read each group's files as ``batch_id = G``, then every published batch that no
group holds from the files its own manifest names. So a member is read from one place at every
moment: its group while the group holds it, else its own files.

* **Replay** of member N (``replace_member``, before N's manifest is published): the group's files
  without N's old rows (rewritten into a new folder), plus the files the new attempt wrote, where
  it wrote them, become the group; then N's manifest is published as for any batch. A crash
  between the two leaves the new rows read from the group and N's old manifest unread; the
  roll-forward publishes the manifest and finds the group already holding this attempt.
* **Retirement** of member N (``remove_member``): N's manifest goes first, then the group without
  N's rows: never a moment where N is read from its own files, which compaction let expire.

The files a swap replaced are noted in ``_offsetbatch/compactions/expiring/`` and deleted by
retention once the grace has passed: a reader that listed the manifests before the swap may
still be reading them."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import asdict

from offsetbatch import faults, storage
from offsetbatch.jobspec import Manifest
from offsetbatch.sinks.files.groups import group_of, rewrite_without
from offsetbatch.sinks.files.intents import Intent, carry_out, write_intent
from offsetbatch.sinks.files.layout import (GROUP_LEFT, GROUP_SWAPPING, CompactionLayout, FilesTable,
                                            GroupManifest, now_iso, output_ids, partition_of,
                                            root_relative)

log = logging.getLogger(__package__)


def group_manifests(sink: FilesTable) -> list[GroupManifest]:
    """The table's groups (one listing, a GET each: a day's batches make one group)."""
    layout = CompactionLayout(sink.layout.meta)
    found = [GroupManifest.load_if_exists(layout.group(g)) for g in sorted(output_ids(storage.children(layout.base)))]
    return [g for g in found if g is not None]


def files_by_base(sink: FilesTable, group: GroupManifest) -> dict[str, list[str]]:
    """A group's files (URIs) by the folder their partition folders start under, the ``basePath``
    a reader gives Spark so that ``event_date`` reads from the folder names."""
    root = sink.layout.root.rstrip("/")
    found: dict[str, list[str]] = defaultdict(list)
    for key in sorted(group.files):
        folder = f"{root}/{key}".rsplit("/", 1)[0]
        partition = partition_of(key)
        found[folder[:len(folder) - len(partition) - 1] if partition else folder].append(f"{root}/{key}")
    return dict(found)


def _holding(sink: FilesTable, output_id: int) -> GroupManifest | None:
    """The group holding ``output_id``'s rows (a pointer a finished swap left is dropped)."""
    g = group_of(sink, output_id)
    if g is None:
        return None
    layout = CompactionLayout(sink.layout.meta)
    group = GroupManifest.load_if_exists(layout.group(g))
    if group is None or output_id not in group.members:
        storage.remove(layout.member(output_id))
        return None
    return group


def _without(sink: FilesTable, group: GroupManifest, member: int,
             stamp: int) -> tuple[dict[str, list[list[int]]], list[str]]:
    """The group's files without ``member``'s rows (those it shared rewritten under a new folder),
    and the files that replaces."""
    root = sink.layout.root.rstrip("/")
    out = CompactionLayout(sink.layout.meta).files(group.group, stamp)
    files = {key: spans for key, spans in group.files.items() if not any(m == member for m, _, _ in spans)}
    replaced = []
    for key, (new_rel, spans) in rewrite_without(group, member, root, out, stamp).items():
        replaced.append(f"{root}/{key}")
        if new_rel is not None:
            files[root_relative(sink, f"{out}/{new_rel}")] = spans
    return files, replaced


def _swap(sink: FilesTable, intent: Intent, output_id: int, rows_before: int) -> None:
    layout = CompactionLayout(sink.layout.meta)
    write_intent(layout, intent)
    carry_out(layout, intent, GROUP_SWAPPING)
    log.info("%s: %s: group %d's manifest no longer names its %d old rows%s", sink.where(output_id), intent.why,
             intent.group, rows_before, "" if intent.drop_members else "; it names the new attempt's files")
    faults.checkpoint(GROUP_LEFT)


def replace_member(sink: FilesTable, output_id: int, attempt: str, staged: Manifest) -> bool:
    """Before a replay of compacted batch ``output_id`` is published: its group holds the attempt's
    rows instead of the old ones. Nothing when it is in no group, or the group holds this attempt
    already (a roll-forward). Whether anything changed."""
    group = _holding(sink, output_id)
    if group is None or group.attempts.get(str(output_id)) == attempt:
        return False
    stamp = time.time_ns()
    files, replaced = _without(sink, group, output_id, stamp)
    for uri in staged.data_files:
        rows = storage.parquet_rows(uri)
        if rows:
            files[root_relative(sink, uri)] = [[output_id, 0, rows]]
    manifest = GroupManifest(group.group, group.members, files, {**group.attempts, str(output_id): attempt},
                             {**group.ranges, str(output_id): [asdict(r) for r in staged.ranges]}, group.day,
                             now_iso(), in_place=True)
    layout = CompactionLayout(sink.layout.meta)
    _swap(sink, Intent(group.group, f"replay of batch {output_id}", [], asdict(manifest), expire=replaced,
                       expire_note=layout.expiry_note(group.group, stamp)), output_id, group.rows_of(output_id))
    return True


def remove_member(sink: FilesTable, output_id: int) -> bool:
    """Retire compacted batch ``output_id``: its manifest is removed, then its rows leave the group
    (the last member's leaving deletes the group). Whether it was in a group."""
    group = _holding(sink, output_id)
    if group is None:
        return False
    stamp = time.time_ns()
    files, replaced = _without(sink, group, output_id, stamp)
    members = [m for m in group.members if m != output_id]
    manifest = None
    if members:
        manifest = GroupManifest(group.group, members, files,
                                 {k: v for k, v in group.attempts.items() if k != str(output_id)},
                                 {k: v for k, v in group.ranges.items() if k != str(output_id)}, group.day,
                                 now_iso(), in_place=True)
    else:
        replaced += [f"{sink.layout.root.rstrip('/')}/{key}" for key in files]
    layout = CompactionLayout(sink.layout.meta)
    _swap(sink, Intent(group.group, f"retirement of batch {output_id}", [], asdict(manifest) if manifest else None,
                       drop_members=[output_id], before=[sink.layout.manifest(output_id)], expire=replaced,
                       expire_note=layout.expiry_note(group.group, stamp)), output_id, group.rows_of(output_id))
    return True
