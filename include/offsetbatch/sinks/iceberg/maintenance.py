"""Maintenance of the iceberg sink's tables (``IcebergSink.maintenance``): what keeps a table that
gains a snapshot per batch the same size after a year, without losing what exactly-once reads.

A pass is five steps, each one ``Action`` per table (the data table or, in upsert mode, the table
of changes; ``<table>_rejected``; in upsert mode the upserted table), in this order:

1. ``iceberg.finish-expiry``: an expiry intent left by a killed pass is finished (below).
2. ``iceberg.compact``: per partition, when at least ``min_input_files`` data files are smaller than
   ``target_file_size``, they are rewritten into files of about that size in ONE ``overwrite``
   snapshot, rows unchanged (their ``batch_id`` too). Its summary has ``offsetbatch.compaction``
   and no ``offsetbatch.pipeline``, so it is no batch marker; on the upserted table it carries
   ``offsetbatch.changes-snapshot`` on. Replacing a batch afterwards rewrites the files holding
   several batches' rows (``sink._replacing``).
3. ``iceberg.expire-snapshots``: the snapshots older than ``retain_before``, except the newest
   ``retain_snapshots`` of the current ancestry (the current one always stays), an oldest-first
   prefix of the ancestry (plus old snapshots outside it). On the table of changes the snapshot
   the upserted table reflects, and all after it, stay (its refresh diffs against it). In order:
   the markers of the expiring snapshots are folded into a new archive file (``markers``,
   *The archive*), the table property naming it is committed (with
   ``write.metadata.delete-after-commit.enabled``, so old metadata.json files go), an intent file
   ``metadata/offsetbatch-expire-<uuid>.json`` lists the files only those snapshots reference (data
   files, manifests, manifest lists), then the expiry is committed.
4. ``iceberg.delete-expired-files``: each intent's files are deleted, each re-checked first
   against every snapshot still in the table, then the intent removed. A kill anywhere is finished
   by step 1 of the next pass.
5. ``iceberg.remove-orphans``: files under the table's location that nothing names (no snapshot,
   not the current or a logged metadata file, not the current archive, no intent) and older than
   ``grace_before`` (younger ones may belong to a commit in flight: the sink moves an attempt's
   files under ``data/`` just before its snapshot).

Fault points: ``maintain.iceberg_compaction_written``, ``maintain.iceberg_archive_written``,
``maintain.iceberg_expired``, ``maintain.iceberg_deleting`` (``offsetbatch.faults``).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from offsetbatch import faults, storage
from offsetbatch.sinks.iceberg import markers
from offsetbatch.sinks.iceberg.catalog import open_catalog
from offsetbatch.sinks.iceberg.rewrite import read_rows, write_rows
from offsetbatch.sinks.maintenance import Action, Horizon

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from offsetbatch.sinks.maintenance import MaintenanceSettings
    from offsetbatch.sinks.iceberg.settings import IcebergSettings

log = logging.getLogger(__package__)

STEP_FINISH = "iceberg.finish-expiry"
STEP_COMPACT = "iceberg.compact"
STEP_EXPIRE = "iceberg.expire-snapshots"
STEP_DELETE = "iceberg.delete-expired-files"
STEP_ORPHANS = "iceberg.remove-orphans"

COMPACTION_WRITTEN = "maintain.iceberg_compaction_written"  # new files written, their snapshot not committed
ARCHIVE_WRITTEN = "maintain.iceberg_archive_written"  # archive file written, its table property not committed
EXPIRED = "maintain.iceberg_expired"  # expiry committed, the intent's files not deleted
DELETING = "maintain.iceberg_deleting"  # the first file of an intent deleted

COMPACTION = "offsetbatch.compaction"
INTENT_PREFIX = "offsetbatch-expire-"
ARCHIVE_PREFIX = "offsetbatch-markers-"
METADATA_VERSIONS = 20  # metadata.json files kept in the metadata log (older ones deleted by pyiceberg)
# pyiceberg sizes the files it writes by in-memory Arrow bytes, several times the Parquet's: a
# compaction group's input is read whole and written as one file per partition
WRITE_SIZE_FACTOR = 16


class TableOwner(Protocol):
    """The sink as this module uses it (``IcebergSink``, which calls ``plan``)."""

    settings: "IcebergSettings"
    pipeline_name: str

    def where(self, batch_id: int | None = None, target: str | None = None) -> str: ...

    def _refresh_upserted(self, catalog: Any, batch_id: int | None) -> None: ...


# ---- the tables ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Owned:
    """One table the sink writes; ``role``: data | changes | rejected | upserted."""

    ident: tuple[str, str]
    role: str

    @property
    def name(self) -> str:
        return ".".join(self.ident)


def owned_tables(sink: "TableOwner") -> list[Owned]:
    s = sink.settings
    tables = [Owned(s.marked_identifier, "changes" if s.upserts else "data"), Owned(s.rejected_identifier, "rejected")]
    if s.upserts:
        tables.append(Owned(s.identifier, "upserted"))
    return tables


def _load(catalog, ident: tuple[str, str]) -> "Table | None":
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(ident)
    except NoSuchTableError:
        return None


# ---- the pass -----------------------------------------------------------------------------------

def plan(sink: "TableOwner", policy: "MaintenanceSettings", horizon: Horizon) -> list[Action]:
    """The pass's actions, in order (module docstring); only reads."""
    steps: dict[str, list[Action]] = defaultdict(list)
    with open_catalog(sink.settings, sink.pipeline_name) as catalog:
        for owned in owned_tables(sink):
            table = _load(catalog, owned.ident)
            if table is not None:
                for action in _table_actions(sink, catalog, owned, table, policy, horizon):
                    steps[action.step].append(action)
    return [a for step in STEPS for a in steps[step]]


STEPS = (STEP_FINISH, STEP_COMPACT, STEP_EXPIRE, STEP_DELETE, STEP_ORPHANS)


def _table_actions(sink: "TableOwner", catalog, owned: Owned, table: "Table", policy: "MaintenanceSettings",
                   horizon: Horizon) -> list[Action]:
    """One table's actions (each step at most once), planned from what it holds now."""
    target, run = f"Iceberg table {owned.name}", partial(_in_catalog, sink, owned)
    actions = []
    intents = _intents(table)
    if intents:
        files = sum(len((storage.read_json_if_exists(p) or {}).get("files", [])) for p in intents)
        actions.append(Action(STEP_FINISH, target, f"finish {len(intents)} interrupted expiry(ies): delete up to "
                              f"{files} file(s) no snapshot references any more",
                              {"intents": len(intents), "files": files}, partial(run, _finish_intents)))
    groups = compaction_groups(table, policy)
    if groups:
        n_in = sum(len(g) for g in groups)
        actions.append(Action(STEP_COMPACT, target, f"compact {n_in} data file(s) smaller than "
                              f"{_size(policy.target_file_size)} in {len(groups)} group(s) into about {len(groups)} "
                              f"file(s), in one snapshot", {"files_in": n_in, "groups": len(groups)},
                              partial(run, _compact, policy)))
    expiry = expiry_plan(table, policy, horizon, _protected(catalog, sink, owned))
    if expiry.ids:
        files = unreferenced(table, set(expiry.ids))
        actions.append(Action(STEP_EXPIRE, target, f"expire {len(expiry.ids)} of {expiry.total} snapshot(s) older "
                              f"than {_at(horizon.retain_before)} (keeping the newest {policy.retain_snapshots}); "
                              f"markers of {expiry.marked} of them archived first",
                              {"snapshots": len(expiry.ids), "archived": expiry.marked},
                              partial(run, _expire, policy, horizon)))
        more = " and the files compacted away above, unless a kept snapshot has them" if groups else ""
        actions.append(Action(STEP_DELETE, target, f"delete {len(files)} file(s) only the expired snapshots "
                              f"reference (data files, manifests, manifest lists){more}", {"files": len(files)},
                              partial(run, _finish_intents)))
    orphans = orphan_files(table, horizon)
    if orphans or expiry.ids:  # an expiry leaves the previous archive and metadata files behind
        also = " (and what the expiry above leaves)" if expiry.ids else ""
        actions.append(Action(STEP_ORPHANS, target, f"remove {len(orphans)} file(s){also} under {table.location()} "
                              f"that nothing references, last written before {_at(horizon.grace_before)}",
                              {"files": len(orphans)}, partial(run, _remove_orphans, horizon)))
    return actions


def _in_catalog(sink: "TableOwner", owned: Owned, step: Callable[..., dict[str, int]],
                *args: Any) -> dict[str, int]:
    """Run ``step`` on the table as it is now (every apply re-reads it)."""
    with open_catalog(sink.settings, sink.pipeline_name) as catalog:
        table = _load(catalog, owned.ident)
        if table is None:
            return {}
        return step(sink, catalog, owned, table, *args)


def _at(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:g} MiB"


def _where(sink: "TableOwner", owned: Owned) -> str:
    return sink.where(None, f"Iceberg table {owned.name}")


# ---- compaction ---------------------------------------------------------------------------------

def compaction_groups(table: "Table", policy: "MaintenanceSettings") -> list[list["DataFile"]]:
    """Per partition, the small files worth joining, in runs of about ``target_file_size`` of
    input each (each run becomes about one file); a partition with fewer than ``min_input_files``
    small files is left."""
    if table.current_snapshot() is None:
        return []
    by_partition: dict[tuple, list] = defaultdict(list)
    for task in table.scan().plan_files():
        f = task.file
        if f.file_size_in_bytes < policy.target_file_size:
            by_partition[(f.spec_id, repr(f.partition))].append(f)
    groups = []
    for files in by_partition.values():
        if len(files) < policy.min_input_files:
            continue
        run: list = []
        for f in sorted(files, key=lambda f: f.file_path):
            if run and sum(x.file_size_in_bytes for x in run) + f.file_size_in_bytes > policy.target_file_size:
                groups.append(run)
                run = []
            run.append(f)
        groups.append(run)
    return [g for g in groups if len(g) > 1]


def _compact(sink: "TableOwner", catalog, owned: Owned, table: "Table",
             policy: "MaintenanceSettings") -> dict[str, int]:
    """Rewrite each group's rows into new files, then one snapshot swapping them in."""
    groups = compaction_groups(table, policy)
    if not groups:
        return {"files_in": 0, "files_out": 0}
    removed = [f for g in groups for f in g]
    added = [f for g in groups for f in _rewrite(sink, owned, table, g, policy.target_file_size)]
    faults.checkpoint(COMPACTION_WRITTEN)
    tx = table.transaction()
    with tx.update_snapshot(snapshot_properties=_compaction_summary(owned, table, removed, added)).overwrite() as snap:
        for f in removed:
            snap.delete_data_file(f)
        for f in added:
            snap.append_data_file(f)
    tx.commit_transaction()
    log.info("%s: compacted %d small file(s) into %d (%d rows, snapshot %d)", _where(sink, owned), len(removed),
             len(added), sum(f.record_count for f in added), tx.table_metadata.current_snapshot_id)
    if owned.role == "changes":
        sink._refresh_upserted(catalog, None)  # the same rows: the upserted table only moves to the new snapshot
    return {"files_in": len(removed), "files_out": len(added)}


def _rewrite(sink: "TableOwner", owned: Owned, table: "Table", group: list["DataFile"],
             target_size: int) -> list["DataFile"]:
    """New files holding exactly the rows of ``group`` (checked by count)."""
    rows = read_rows(table.metadata, table.io, group)
    written = write_rows(table.metadata, table.io, rows, target_size * WRITE_SIZE_FACTOR)
    expected, got = sum(f.record_count for f in group), sum(f.record_count for f in written)
    if not expected == rows.num_rows == got:
        raise RuntimeError(f"{_where(sink, owned)}: compaction read {rows.num_rows} and wrote {got} rows of "
                           f"{expected}; nothing was committed. Report this as a bug; the orphan sweep removes the "
                           f"files it wrote")
    return written


def _compaction_summary(owned: Owned, table: "Table", removed: list, added: list) -> dict[str, str]:
    """No batch marker (no ``offsetbatch.pipeline``); on the upserted table, the changes snapshot
    its rows still reflect."""
    from offsetbatch.sinks.iceberg import upsert

    props = {COMPACTION: f"{len(removed)} file(s) into {len(added)}"}
    if owned.role == "upserted" and upsert.reflected(table) is not None:
        props[upsert.CHANGES_SNAPSHOT] = str(upsert.reflected(table))
    return props


# ---- expiry -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Expiry:
    ids: list[int]  # ancestry prefix first (oldest first), then old snapshots outside the ancestry
    through: int | None  # the newest expiring snapshot of the ancestry
    going: list = field(default_factory=list)  # the expiring ancestry snapshots' markers the archive lacks
    total: int = 0
    marked: int = 0


def _protected(catalog, sink: "TableOwner", owned: Owned) -> int | None:
    """The changes snapshot the upserted table reflects: its refresh diffs against it."""
    if owned.role != "changes":
        return None
    from offsetbatch.sinks.iceberg import upsert

    return upsert.reflected(_load(catalog, sink.settings.identifier))


def expiry_plan(table: "Table", policy: "MaintenanceSettings", horizon: Horizon, protected: int | None) -> Expiry:
    """The oldest ancestry snapshots past the retention, stopping at the newest ``retain_snapshots``,
    at a branch or tag head and at ``protected`` (a prefix: markers fold oldest first), plus old
    snapshots outside the ancestry; and the markers the archive must take first."""
    cutoff = int(horizon.retain_before.timestamp() * 1000)
    chain = markers.ancestry(table)
    heads = {ref.snapshot_id for ref in table.metadata.refs.values()}
    going = []
    for snapshot in chain[:max(0, len(chain) - policy.retain_snapshots)]:
        if snapshot.timestamp_ms >= cutoff or snapshot.snapshot_id in (protected, *heads):
            break
        going.append(snapshot)
    in_chain = {s.snapshot_id for s in chain}
    others = [s.snapshot_id for s in table.snapshots() if s.snapshot_id not in in_chain and s.timestamp_ms < cutoff
              and s.snapshot_id not in heads and s.snapshot_id != protected]
    ref = markers.archive_ref(table) or {}  # where the archive stops (the property: no file read)
    folded = {s.snapshot_id for s in markers.after_archive(chain, markers.Archive(ref.get("through_snapshot_id")))}
    to_fold = [m for m in (markers.marker_of(s) for s in going if s.snapshot_id in folded) if m is not None]
    return Expiry([s.snapshot_id for s in going] + others, going[-1].snapshot_id if going else None, to_fold,
                  len(table.snapshots()), len(to_fold))


def _expire(sink: "TableOwner", catalog, owned: Owned, table: "Table", policy: "MaintenanceSettings",
            horizon: Horizon) -> dict[str, int]:
    expiry = expiry_plan(table, policy, horizon, _protected(catalog, sink, owned))
    if not expiry.ids:
        return {"snapshots": 0, "archived": 0}
    _commit_archive(sink, owned, table, expiry)
    table = catalog.load_table(owned.ident)
    files = unreferenced(table, set(expiry.ids))
    intent = f"{table.location()}/metadata/{INTENT_PREFIX}{uuid.uuid4()}.json"
    storage.write_json(intent, {"table": owned.name, "snapshot_ids": expiry.ids, "files": sorted(files),
                                "written_at": datetime.now(timezone.utc).isoformat()})
    table.maintenance.expire_snapshots().by_ids(expiry.ids).commit()
    log.info("%s: expired %d snapshot(s) (%d marker(s) archived); %d file(s) to delete, listed in %s",
             _where(sink, owned), len(expiry.ids), expiry.marked, len(files), intent)
    faults.checkpoint(EXPIRED)
    return {"snapshots": len(expiry.ids), "archived": expiry.marked}


def _commit_archive(sink: "TableOwner", owned: Owned, table: "Table", expiry: Expiry) -> None:
    """Write the archive with the expiring markers, then commit the property naming it (and the
    metadata log's bound) in one table commit; the expiry comes after."""
    from pyiceberg.table import TableProperties

    props: dict[str, str] = {}
    if TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED not in table.properties:
        props[TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED] = "true"
    if TableProperties.METADATA_PREVIOUS_VERSIONS_MAX not in table.properties:
        props[TableProperties.METADATA_PREVIOUS_VERSIONS_MAX] = str(METADATA_VERSIONS)
    if TableProperties.MANIFEST_MERGE_ENABLED not in table.properties:  # a table created before 0.4
        props[TableProperties.MANIFEST_MERGE_ENABLED] = "true"
    if expiry.going and expiry.through is not None:
        ref = markers.archive_ref(table) or {}
        archive = markers.fold(markers.archive_of(table), expiry.going, expiry.through)
        n = int(ref.get("n", 0)) + 1
        path = f"{table.location()}/metadata/{ARCHIVE_PREFIX}{n:05d}-{uuid.uuid4()}.json.gz"
        with storage.open_write(path) as f:  # not pyiceberg's FileIO: it would gzip a ``.gz`` name again
            f.write(markers.encode(archive))
        faults.checkpoint(ARCHIVE_WRITTEN)
        # "previous": a reader that loaded the metadata just before this commit still reads the old
        # archive, so the orphan sweep keeps it until the next archive replaces this one
        props[markers.ARCHIVE_PROPERTY] = json.dumps({"path": path, "through_snapshot_id": expiry.through, "n": n,
                                                      "applied": [list(r) for r in archive.applied],
                                                      **({"previous": ref["path"]} if ref.get("path") else {})})
        log.info("%s: markers of %d expiring snapshot(s) archived in %s (%d live output(s), through snapshot %d)",
                 _where(sink, owned), len(expiry.going), path, len(archive.live), expiry.through)
    if props:
        table.transaction().set_properties(**props).commit_transaction()


# ---- which files snapshots reference ------------------------------------------------------------

def _key(uri: str) -> str:
    """A file's name without its scheme: ``file:///a`` and ``/a``, ``s3://b/k`` and ``b/k`` agree."""
    return uri.partition("://")[2] if "://" in uri else uri


def _named(table: "Table", snapshots: Iterable["Snapshot"], cache: dict) -> dict[str, str]:
    """Key (``_key``) -> URI of the manifest lists, manifests and live data files of ``snapshots``.
    ``cache``: manifest path -> its files; a table appended to keeps every earlier manifest in each
    new manifest list, so without it a year of snapshots reads the same manifests again and again."""
    out: dict[str, str] = {}
    for snapshot in snapshots:
        out[_key(snapshot.manifest_list)] = snapshot.manifest_list
        for manifest in snapshot.manifests(table.io):
            out[_key(manifest.manifest_path)] = manifest.manifest_path
            if manifest.manifest_path not in cache:
                cache[manifest.manifest_path] = {_key(e.data_file.file_path): e.data_file.file_path
                                                 for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)}
            out.update(cache[manifest.manifest_path])
    return out


def references(table: "Table", snapshots: Iterable["Snapshot"], cache: dict | None = None) -> set[str]:
    """Keys of the files ``snapshots`` need (``_named``)."""
    return set(_named(table, snapshots, {} if cache is None else cache))


def unreferenced(table: "Table", expiring: set[int]) -> set[str]:
    """Files the expiring snapshots reference and no other snapshot does (URIs as they are named)."""
    cache: dict = {}
    kept = references(table, [s for s in table.snapshots() if s.snapshot_id not in expiring], cache)
    going = _named(table, [s for s in table.snapshots() if s.snapshot_id in expiring], cache)
    return {uri for key, uri in going.items() if key not in kept}


def _intents(table: "Table") -> list[str]:
    folder = f"{table.location()}/metadata"
    return [f"{folder}/{n}" for n in storage.children(folder) if n.startswith(INTENT_PREFIX) and n.endswith(".json")]


def _finish_intents(sink: "TableOwner", catalog, owned: Owned, table: "Table") -> dict[str, int]:
    """Delete each intent's files that no snapshot of the table references now, then the intent."""
    deleted = 0
    intents = _intents(table)
    for intent in intents:
        doc = storage.read_json_if_exists(intent) or {}
        table = catalog.load_table(owned.ident)
        kept = references(table, table.snapshots()) | _metadata_files(table)
        for uri in doc.get("files", []):
            if _key(uri) in kept:
                continue
            if _delete(table, uri):
                deleted += 1
                if deleted == 1:
                    faults.checkpoint(DELETING)
        storage.remove(intent)
        log.info("%s: expiry intent %s finished (%d file(s) deleted so far)", _where(sink, owned), intent, deleted)
    return {"intents": len(intents), "files": deleted}


def _delete(table: "Table", uri: str) -> bool:
    try:
        table.io.delete(uri)
    except FileNotFoundError:
        return False
    return True


# ---- orphans ------------------------------------------------------------------------------------

def _metadata_files(table: "Table") -> set[str]:
    """Keys of the current and logged metadata.json files and the current and previous markers archive."""
    out = {_key(table.metadata_location)} | {_key(e.metadata_file) for e in table.metadata.metadata_log}
    ref = markers.archive_ref(table) or {}
    out |= {_key(ref[k]) for k in ("path", "previous") if ref.get(k)}
    return out


def _listing(location: str) -> dict[str, tuple[str, float]]:
    """Key -> (URI, modification time in epoch seconds) of every file under ``location``."""
    from offsetbatch.storage import _fs_of

    scheme = location.partition("://")[0] if "://" in location else "file"
    with _fs_of(location) as (fs, path):
        if not fs.exists(path):
            return {}
        found = fs.find(path, detail=True)
    out = {}
    for name, info in found.items():
        mtime = info.get("mtime", info.get("LastModified", info.get("last_modified")))
        if isinstance(mtime, datetime):
            mtime = mtime.timestamp()
        uri = f"file://{name}" if scheme == "file" else f"{scheme}://{name.lstrip('/')}"
        out[_key(uri)] = (uri, float(mtime) if mtime is not None else float("inf"))
    return out


def orphan_files(table: "Table", horizon: Horizon) -> list[str]:
    """Files under the table's location nothing names, last written before ``grace_before``."""
    before = horizon.grace_before.timestamp()
    kept = references(table, table.snapshots()) | _metadata_files(table)
    return sorted(uri for key, (uri, mtime) in _listing(table.location()).items()
                  if key not in kept and mtime < before and not key.rsplit("/", 1)[-1].startswith(INTENT_PREFIX))


def _remove_orphans(sink: "TableOwner", catalog, owned: Owned, table: "Table", horizon: Horizon) -> dict[str, int]:
    orphans = orphan_files(table, horizon)
    deleted = sum(_delete(table, uri) for uri in orphans)
    if orphans:
        log.info("%s: removed %d orphaned file(s) under %s", _where(sink, owned), deleted, table.location())
    return {"files": deleted}
