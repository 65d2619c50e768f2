"""Maintenance of the delta sink's tables (``DeltaSink.maintenance``): what keeps a table that
gains a commit per batch the same size after a year, without losing what exactly-once reads.

A pass is three steps, each one ``Action`` per table (the data table or, in upsert mode, the table
of changes; ``<table>_rejected``; in upsert mode the upserted table), in this order:

1. ``delta.compact``: when at least ``min_input_files`` files are smaller than ``target_file_size``,
   delta-rs's ``optimize.compact`` rewrites them into files of about that size in one commit, rows
   unchanged (their ``batch_id`` too). Its ``commitInfo`` has no ``offsetbatch.pipeline``, so it is
   no batch marker; the application transactions are table state and stay. Replacing a batch
   afterwards rewrites the files holding several batches' rows (delta-rs's ``replaceWhere``).
2. ``delta.vacuum``: files no version younger than ``retain`` references, and files no version
   ever referenced (a commit that lost a race, a killed one) older than ``retain``, are deleted;
   delta-rs takes whole hours, so ``retain`` is rounded up to one.
   ``retain`` is at least ``in_flight_grace`` (``MaintenanceSettings``), so a commit writing its
   files now keeps them. Vacuum skips ``_offsetbatch/``, where the markers archive lives.
3. ``delta.clean-log``: the markers of every log entry a cleanup may delete (those before the new
   checkpoint) are folded into a new archive file (``markers``, *The archive*), then a checkpoint is
   written, the table's ``delta.logRetentionDuration`` set to ``retain`` (seconds) and delta-rs's
   ``cleanup_metadata`` deletes the log entries older than it. A pass killed after the archive
   leaves entries both in the archive and the log: readers skip the log's up to the archive's
   version, so nothing is counted twice, and the next pass cleans them.

Fault points: ``maintain.delta_archive_written`` (``offsetbatch.faults``).
"""

from __future__ import annotations

import logging
import math
from functools import partial
from typing import TYPE_CHECKING

from offsetbatch import faults, storage
from offsetbatch.sinks.delta import markers
from offsetbatch.sinks.delta.table import CONFIGURATION, hooks
from offsetbatch.sinks.maintenance import Action, Horizon
from offsetbatch.sinks.markers import encode, fold

if TYPE_CHECKING:
    from offsetbatch.sinks.delta.table import TableOwner
    from deltalake import DeltaTable

    from offsetbatch.sinks.maintenance import MaintenanceSettings

log = logging.getLogger(__package__)

STEP_COMPACT, STEP_VACUUM, STEP_CLEAN_LOG = "delta.compact", "delta.vacuum", "delta.clean-log"
STEPS = (STEP_COMPACT, STEP_VACUUM, STEP_CLEAN_LOG)
ARCHIVE_WRITTEN = "maintain.delta_archive_written"
MAINTENANCE = {"offsetbatch.maintenance": "true"}  # commitInfo of a pass's commits: not a batch's


def owned_tables(sink: "TableOwner") -> list[str]:
    s = sink.settings
    return [s.marked_table, s.rejected_table, *([s.table] if s.upserts else [])]


def plan(sink: "TableOwner", policy: "MaintenanceSettings", horizon: Horizon) -> list[Action]:
    """The pass's actions, in order (module docstring); only reads."""
    actions: list[Action] = []
    for location in owned_tables(sink):
        table = sink.open(location)
        if table is not None:
            actions.extend(_table_actions(sink, location, table, policy, horizon))
    return sorted(actions, key=lambda a: STEPS.index(a.step))


def _table_actions(sink: "TableOwner", location: str, table: "DeltaTable", policy: "MaintenanceSettings",
                   horizon: Horizon) -> list[Action]:
    target = f"Delta table {location}"
    actions = []
    small = _small_files(table, policy.target_file_size)
    if small >= policy.min_input_files:
        actions.append(Action(STEP_COMPACT, target, f"compact {small} file(s) smaller than "
                              f"{policy.target_file_size // (1024 * 1024)} MiB, in one commit", {"files_in": small},
                              partial(_compact, sink, location, policy)))
    hours = _retention_hours(policy)
    going = table.vacuum(retention_hours=hours, dry_run=True, enforce_retention_duration=False)
    if going:
        actions.append(Action(STEP_VACUUM, target, f"delete {len(going)} file(s) no version of the last {hours} h "
                              f"references", {"files": len(going)}, partial(_vacuum, sink, location, policy)))
    entries = _log_entries(location)
    if entries > 1:
        actions.append(Action(STEP_CLEAN_LOG, target, f"checkpoint at version {table.version()}, archive the "
                              f"markers of older log entries, delete entries older than {policy.retain:g} s "
                              f"({entries} JSON entries now)", {"log_entries": entries},
                              partial(_clean_log, sink, location, policy)))
    return actions


def _small_files(table: "DeltaTable", target: int) -> int:
    import pyarrow as pa

    sizes = pa.table(table.get_add_actions(flatten=True)).column("size_bytes").to_pylist()
    return sum(1 for s in sizes if s < target)


def _retention_hours(policy: "MaintenanceSettings") -> int:
    return max(1, math.ceil(policy.retain / 3600))


def _log_entries(location: str) -> int:
    return sum(1 for n in storage.children(f"{location.rstrip('/')}/_delta_log") if n.endswith(".json"))


def _compact(sink: "TableOwner", location: str, policy: "MaintenanceSettings") -> dict[str, int]:
    from deltalake import CommitProperties

    table = sink.open(location)
    metrics = table.optimize.compact(target_size=policy.target_file_size, post_commithook_properties=hooks(),
                                     commit_properties=CommitProperties(custom_metadata=MAINTENANCE))
    log.info("pipeline %s, Delta table %s: compacted %d file(s) into %d", sink.pipeline_name, location,
             metrics.get("numFilesRemoved", 0), metrics.get("numFilesAdded", 0))
    return {"files_in": int(metrics.get("numFilesRemoved", 0)), "files_out": int(metrics.get("numFilesAdded", 0))}


def _vacuum(sink: "TableOwner", location: str, policy: "MaintenanceSettings") -> dict[str, int]:
    from deltalake import CommitProperties

    deleted = sink.open(location).vacuum(retention_hours=_retention_hours(policy), dry_run=False,
                                         enforce_retention_duration=False, post_commithook_properties=hooks(),
                                         commit_properties=CommitProperties(custom_metadata=MAINTENANCE))
    return {"files": len(deleted)}


def _clean_log(sink: "TableOwner", location: str, policy: "MaintenanceSettings") -> dict[str, int]:
    """Archive, checkpoint, retention, cleanup (module docstring, step 3)."""
    from deltalake import CommitProperties

    table = sink.open(location)
    wanted = {**CONFIGURATION, "delta.logRetentionDuration": f"interval {math.ceil(policy.retain)} seconds"}
    if any(table.metadata().configuration.get(k) != v for k, v in wanted.items()):
        table.alter.set_table_properties(wanted, post_commithook_properties=hooks(),
                                         commit_properties=CommitProperties(custom_metadata=MAINTENANCE))
        table = sink.open(location)
    version = table.version()
    archive = markers.archive_of(location)
    after = archive.through_snapshot_id if archive else None
    going = [m for m in markers.commits(table, after) if m.snapshot_id <= version]
    if going or archive is None:
        folded = fold(archive, going, version)
        with storage.open_write(markers.archive_path(location, version)) as f:
            f.write(encode(folded))
        faults.checkpoint(ARCHIVE_WRITTEN)
    before = _log_entries(location)
    table.create_checkpoint()
    table.cleanup_metadata()
    after_n = _log_entries(location)
    for old in sorted(storage.children(f"{location.rstrip('/')}/{markers.ARCHIVE_FOLDER}"))[:-1]:
        storage.remove(f"{location.rstrip('/')}/{markers.ARCHIVE_FOLDER}/{old}")  # superseded archives
    log.info("pipeline %s, Delta table %s: checkpoint at version %d, %d marker(s) archived, %d of %d log entries "
             "deleted", sink.pipeline_name, location, version, len(going), before - after_n, before)
    return {"archived": len(going), "log_entries_deleted": before - after_n}
