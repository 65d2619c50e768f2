"""Retention: abandoned attempt folders, trash and rejected records past their time; on an object
store also the files compaction replaced, once no reader can still be reading them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from offsetbatch import faults, storage
from offsetbatch.jobspec import Manifest
from offsetbatch.sinks.files.intents import pending_intents
from offsetbatch.sinks.files.layout import (RETENTION_DELETING, CompactionLayout, FilesTable,
                                            GroupManifest, mtime, newest_mtime, utc)
from offsetbatch.sinks.files.object_store import group_manifests
from offsetbatch.sinks.maintenance import Horizon
from offsetbatch.sinks.staging import ATTEMPTS, LEGACY_ATTEMPTS

log = logging.getLogger(__package__)


@dataclass
class RetentionPlan:
    attempts: list[str] = field(default_factory=list)
    trash: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    rejected_rows: int = 0
    rejected_files: int = 0
    # an object store's compaction: files swaps replaced (``expired``, listed in ``notes``) and
    # folders of group files no group names (a pass killed before its swap)
    expired: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unnamed: list[str] = field(default_factory=list)
    # an object store: published batches whose rejected records (in their attempt folder) go
    rejected_of: list[int] = field(default_factory=list)

    def any(self) -> bool:
        return bool(self.paths() or self.rejected_of)

    def paths(self) -> list[str]:
        """In deletion order: a note goes after the files it lists, so a killed pass leaves it to the next."""
        return self.attempts + self.trash + self.rejected + self.expired + self.unnamed + self.notes

    def counts(self) -> dict[str, int]:
        return {"attempts": len(self.attempts), "trash": len(self.trash),
                "rejected_folders": len(self.rejected) + len(self.rejected_of),
                "rejected_rows": self.rejected_rows, "rejected_files": self.rejected_files,
                "replaced_files": len(self.expired), "unnamed_folders": len(self.unnamed)}


def _abandoned(sink: FilesTable, folder: str, batch_id: int, attempt: str, horizon: Horizon,
               locations: set[str]) -> bool:
    """Whether an attempt folder can go: nothing written since the grace, and its batch published
    from another attempt, or older than the retention. One a published manifest names stays."""
    if folder in locations:
        return False
    newest = newest_mtime(folder)
    if newest >= utc(horizon.grace_before).timestamp():
        return False
    if newest < utc(horizon.retain_before).timestamp():
        return True
    staged = storage.read_json_if_exists(f"{folder}/_manifest.json") or {}
    output_id = staged.get("output_id", staged.get("batch_id", batch_id))
    current = Manifest.load_if_exists(sink.layout.manifest(output_id))
    return current is not None and current.attempt not in (None, attempt)


def plan_retention(sink: FilesTable, horizon: Horizon) -> RetentionPlan:
    """What retention would delete now: changes nothing."""
    found = RetentionPlan()
    meta = sink.layout.meta
    # on an object store published files stay in their attempt folder, and a group names some of them
    locations, published, groups = set(), {}, []
    if sink.in_place:
        published, groups = sink.published_manifests(), group_manifests(sink)
        locations = {m.location for m in published.values() if m.location}
        locations |= _attempts_named(sink, groups)
    for area in (ATTEMPTS, LEGACY_ATTEMPTS):
        for batch in storage.children(f"{meta}/{area}"):
            if not batch.startswith("batch_id=") or not batch[len("batch_id="):].isdigit():
                continue
            for name in storage.children(f"{meta}/{area}/{batch}"):
                folder = f"{meta}/{area}/{batch}/{name}"
                if name.startswith("attempt=") and _abandoned(sink, folder, int(batch[len("batch_id="):]),
                                                               name[len("attempt="):], horizon, locations):
                    found.attempts.append(folder)
    grace = utc(horizon.grace_before).timestamp()
    for name in storage.children(f"{meta}/trash"):
        entry = f"{meta}/trash/{name}"
        if sink.in_place and name.endswith(".json"):
            continue  # a note naming a replaced folder: the next publish's ``_sweep`` deletes both
        if newest_mtime(entry) < grace:
            found.trash.append(entry)
    if sink.in_place:
        _plan_rejected_in_place(sink, horizon, published, found)
        _plan_group_files(sink, groups, grace, found)
    else:
        _plan_rejected(sink, horizon, found)
    return found


def _plan_rejected_in_place(sink: FilesTable, horizon: Horizon, published: dict[int, Manifest],
                            found: RetentionPlan) -> None:
    """On an object store rejected records stay in their attempt folder, named by the batch's
    manifest: those of batches published before the retention (or a killed pass's, half done)."""
    before = utc(horizon.retain_before).timestamp()
    for output_id, manifest in sorted(published.items()):
        if manifest.rejected_expired or (manifest.rejected_files and mtime(sink.layout.manifest(output_id)) < before):
            found.rejected_of.append(output_id)
            found.rejected_files += len(manifest.rejected_files or manifest.rejected_expired)
            found.rejected_rows += manifest.rows_rejected if manifest.rejected_files else 0


def _expire_rejected(sink: FilesTable, output_id: int) -> None:
    """Take the batch's rejected files out of its manifest (a PUT: readers stop reading them), delete
    them, then clear the note; a pass killed between two steps leaves the next one the rest."""
    uri = sink.layout.manifest(output_id)
    manifest = Manifest.load_if_exists(uri)
    if manifest is None:
        return
    if manifest.rejected_files:
        manifest.rejected_expired, manifest.rejected_files = manifest.rejected_expired + manifest.rejected_files, []
        manifest.save(uri)
    for path in manifest.rejected_expired:
        storage.remove(path)
    manifest.rejected_expired = []
    manifest.save(uri)


def _attempts_named(sink: FilesTable, groups: list[GroupManifest]) -> set[str]:
    """Attempt folders holding files a group names (a replay's, between the group's swap and its
    manifest's publication)."""
    root = sink.layout.root.rstrip("/")
    return {f"{root}/{key.split('/data/', 1)[0]}" for g in groups for key in g.files
            if "/attempt=" in key and "/data/" in key}


def _plan_group_files(sink: FilesTable, groups: list[GroupManifest], grace: float, found: RetentionPlan) -> None:
    """On an object store: the files of the expiry notes past the grace, and group folders past the
    grace whose files neither a group nor a pending swap names."""
    layout = CompactionLayout(sink.layout.meta)
    for name in storage.children(layout.expiring):
        note = f"{layout.expiring}/{name}"
        if name.endswith(".json") and mtime(note) < grace:
            found.expired += (storage.read_json_if_exists(note) or {}).get("files", [])
            found.notes.append(note)
    root = sink.layout.root.rstrip("/")
    named = {f"{root}/{key}" for g in groups for key in g.files}
    for uri in pending_intents(layout):
        named |= {f"{root}/{key}" for key in ((storage.read_json_if_exists(uri) or {}).get("manifest") or {}).get(
            "files", {})}
    for name in storage.children(layout.files_base):
        folder = f"{layout.files_base}/{name}"
        if not any(uri.startswith(f"{folder}/") for uri in named) and newest_mtime(folder) < grace:
            found.unnamed.append(folder)


def _plan_rejected(sink: FilesTable, horizon: Horizon, found: RetentionPlan) -> None:
    before = utc(horizon.retain_before).timestamp()
    for name in storage.children(sink.rejected.base):
        if not name.startswith("batch_id=") or not name[len("batch_id="):].isdigit():
            continue
        output_id, folder = int(name[len("batch_id="):]), f"{sink.rejected.base}/{name}"
        manifest = sink.layout.manifest(output_id)
        when = mtime(manifest) if storage.exists(manifest) else newest_mtime(folder)
        if when < before:
            files = storage.files(folder)
            found.rejected.append(folder)
            found.rejected_files += len(files)
            found.rejected_rows += sum(storage.parquet_rows(f) for f in files)


def apply_retention(sink: FilesTable, horizon: Horizon) -> dict[str, int]:
    """Delete what ``plan_retention`` finds now (re-read: a batch may have published meanwhile)."""
    found = plan_retention(sink, horizon)
    steps = [lambda p=path: storage.remove(p) for path in found.paths()]
    steps += [lambda i=output_id: _expire_rejected(sink, i) for output_id in found.rejected_of]
    for i, step in enumerate(steps):
        step()
        if i == 0:
            faults.checkpoint(RETENTION_DELETING)  # one thing deleted, the rest left to the next pass
    counts = found.counts()
    log.info("%s: retention deleted %d abandoned attempt folders, %d trash entries, %d rejected folders "
             "(%d files, %d rows), %d files compaction replaced, %d unnamed group folders", sink.where(),
             counts["attempts"], counts["trash"], counts["rejected_folders"], counts["rejected_files"],
             counts["rejected_rows"], counts["replaced_files"], counts["unnamed_folders"])
    return counts

