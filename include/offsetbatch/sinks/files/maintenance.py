"""Maintenance of a files sink's table: compaction of a closed day's small files, and retention of
abandoned attempts, trash and rejected records (``FilesSink.maintenance``).

**Compaction.** A *group* is the published batches whose manifests were published on the same closed UTC
day (before ``horizon.now``'s date), none of them compacted already, once the day holds at least
``min_input_files`` files smaller than ``target_file_size``. Its id ``G`` is its first member's
output id. Each partition's (``event_date=D``, or the batch folder itself without an event time)
rows are rewritten member by member, in output-id order, into ``part-compacted-*.parquet`` files of
about the target size (a file smaller than the target is read, a bigger one is moved as it is) in

    <table>/batch_id=G/[event_date=D/]part-*.parquet

Partition discovery (Spark's, pyarrow's) names the column from the folder, so **after compaction
every member's rows read with ``batch_id = G``**: which offsets a row came from is in the
manifests, not in that column. ``_offsetbatch/compactions/batch_id=G.json`` (``GroupManifest``)
records, per file, the row spans ``[start, end)`` each member's rows hold in it, each member's
attempt and ranges; ``_offsetbatch/compactions/members/batch_id=N.json`` points member N at its
group. Members' own manifests are not changed (``published_ids``, ``published_manifests`` and a
ledger rebuild read what they read before).

**Swap.** The compacted folder is written under ``_offsetbatch/compactions/staged/`` first; then an
intent (``_offsetbatch/compactions/pending-G.json``) lists every rename of the swap, and the swap
moves each member's folder (G's included) into ``_offsetbatch/trash/compaction-G-*``, then the new
folder into ``batch_id=G``, then writes the group manifest and the pointers and deletes the intent.
Each rename is done only if its source exists and its target does not, so a pass killed anywhere
is finished by the next pass or the next publish or retire (``finish_pending``); a staged folder
without an intent is deleted. A reader listing the table during the swap (a few renames) can miss
some of the group's rows; it never sees a row twice.

**Replays and retirements of a member** (``leave_group``, called by ``FilesSink.publish`` and
``retire``). The group's files that hold member N's rows are rewritten without them (the other
members' spans move up), and when N is the group's own id its new output joins the group folder
(it cannot have a folder of its own: that is the group's). The same kind of intent swaps the
files, then the publish goes on as for any batch: N's new output becomes ``batch_id=N`` (N != G).
A crash between the two leaves N's rows nowhere, never twice, and the roll-forward publishes them.
The group manifest notes each member's attempt, so publishing the same attempt again (a
roll-forward) does not take it out of its group a second time.

**On an object store** (nothing is renamed; ``object_store``) the group's files are written once,
to ``_offsetbatch/compactions/files/G-<stamp>/[event_date=D/]``, files of at least the target size
stay where their attempt wrote them, and the group manifest, one PUT through the same kind of
intent, names them all by their path under the table's root: it is the publication. Readers read a
group's members from it (``batch_id = G``) and every other batch from its own manifest. The
members' small files are noted in ``_offsetbatch/compactions/expiring/`` and deleted by retention
after the grace, when no reader can still be reading them.

**Retention.** Attempt folders nothing has written to since ``grace_before`` whose batch was
published from another attempt, or that are older than ``retain_before`` (an attempt of a planned
batch may still be running: it is never younger than the grace); trash entries older than the
grace; ``_rejected/batch_id=N`` of batches published before ``retain_before`` (on an object store
the rejected files such a batch's manifest names: taken out of it, ``rejected_expired`` noting
them until they are deleted, a PUT each; the rewrite dates the manifest, so a batch never
compacted joins the group of the day its rejected records went).

Modules: ``layout`` (where things are, the group manifest), ``intents`` (swaps written down first),
``compaction``, ``groups`` (a member's replay or retirement), ``object_store`` (the same by group
manifest), ``retention``; here, the actions of a pass (``FilesSink.maintenance``).
"""

from __future__ import annotations

import logging

from offsetbatch import storage
from offsetbatch.sinks.files.compaction import GroupPlan, compact, plan_groups
from offsetbatch.sinks.files.intents import finish_pending, orphaned_staging, pending_intents
from offsetbatch.sinks.files.layout import CompactionLayout, FilesTable, mib
from offsetbatch.sinks.files.retention import apply_retention, plan_retention
from offsetbatch.sinks.maintenance import Action, Horizon, MaintenanceSettings

log = logging.getLogger(__name__)


def actions(sink: FilesTable, policy: MaintenanceSettings, horizon: Horizon) -> list[Action]:
    """``FilesSink.maintenance``: finish killed swaps, compact closed days, then retention."""
    planned: list[Action] = []
    layout = CompactionLayout(sink.layout.meta)
    pending, orphans = pending_intents(layout), orphaned_staging(layout)
    if pending or orphans:
        planned.append(Action("files.finish-compactions", sink.target,
                              f"finish {len(pending)} swap(s) a killed pass left, delete {len(orphans)} "
                              f"unswapped staged compaction(s)", {"pending": len(pending), "staged": len(orphans)},
                              lambda: _finish_all(sink)))
    planned += [_compaction_action(sink, policy, horizon, plan) for plan in plan_groups(sink, policy, horizon)]
    found = plan_retention(sink, horizon)
    if found.any():
        c = found.counts()
        planned.append(Action(
            "files.retention", sink.target,
            f"delete {c['attempts']} abandoned attempt folder(s), {c['trash']} trash entr(ies), "
            f"{c['rejected_folders']} rejected folder(s) ({c['rejected_files']} files, {c['rejected_rows']} rows)"
            + (f", {c['replaced_files']} file(s) compaction replaced, {c['unnamed_folders']} unnamed group folder(s)"
               if sink.in_place else ""),
            c, lambda: apply_retention(sink, horizon)))
    return planned


def _finish_all(sink: FilesTable) -> dict[str, int]:
    layout = CompactionLayout(sink.layout.meta)
    finished = finish_pending(sink)
    orphans = orphaned_staging(layout)
    for folder in orphans:
        storage.remove(folder)
    return {"pending": finished, "staged": len(orphans)}


def _compaction_action(sink: FilesTable, policy: MaintenanceSettings, horizon: Horizon, plan: GroupPlan) -> Action:
    after = plan.files_after(policy.target_file_size)
    return Action("files.compact", sink.target,
                  f"{plan.day}: {len(plan.members)} batches ({plan.members[0]}..{plan.members[-1]}), "
                  f"{len(plan.files)} files ({mib(plan.bytes())}) in {len(plan.partitions())} partition(s) into "
                  f"about {after} in batch_id={plan.group}",
                  {"batches": len(plan.members), "files_before": len(plan.files), "files_after": after,
                   "bytes_before": plan.bytes()},
                  lambda: compact(sink, policy, horizon, plan.day))
