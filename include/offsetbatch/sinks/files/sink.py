"""The ``files`` sink: a Parquet table of one folder per batch.

On a disk or HDFS (a folder rename is one atomic operation), published by renames:

    <table>/batch_id=N/[event_date=D/]part-*.parquet     committed output (the read path)
    <table>/_rejected/batch_id=N/part-*.parquet           committed rejected records
    <table>/_offsetbatch/manifests/batch_id=N.json        manifest of the published output (the marker)
    <table>/_offsetbatch/...                               staging (``StagingLayout``)

Readers of ``<table>`` see only published batches: everything unpublished sits under
``_offsetbatch/``, which Spark's and pyarrow's file sources skip. A batch is published after its
ledger transaction, so ``spark.read.parquet(table)`` never shows an uncommitted batch. A replay of
batch N replaces the folder ``batch_id=N`` (a rename at a time: a reader listing the table during
that rename can see neither version of N; table formats with snapshots avoid that).

On an object store (``s3a://``, ``s3://``: no rename, a "move" copies every object) nothing is
moved. The job writes an attempt's files once, into its attempt folder; publishing writes the
manifest ``_offsetbatch/manifests/batch_id=N.json`` (one PUT: there whole or not at all) naming
that folder and its files, and the manifest *is* the publication. ``read_committed`` reads the
files the manifests name; a plain ``spark.read.parquet(table)`` lists no data on an object store
(all of it is under ``_offsetbatch/``), so readers there use ``read_committed``, the manifests, or
the iceberg sink. A replay swaps the manifest to the new attempt's folder, then deletes the old
folder; the folders a crash leaves unreferenced are listed in ``_offsetbatch/trash/`` before the
swap and deleted by the next publish (``_sweep``).

Maintenance (``sinks.files.maintenance``) compacts a closed day's batches into the folder of the day's
first batch, ``batch_id=G`` (their rows then read with ``batch_id = G``; the manifests still map
offsets to batches), and deletes abandoned attempts, old trash and old rejected records. A publish
or retire first finishes a compaction a killed pass left half swapped, and a replay or retirement
of a compacted batch first takes its rows out of its group's folder (``leave_group``). On an
object store a group is a manifest, ``_offsetbatch/compactions/batch_id=G.json``, naming the
compacted files (``object_store``); readers read a group's members from it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Sequence

from offsetbatch import faults, storage
from offsetbatch.jobspec import Manifest
from offsetbatch.sinks.base import KeepsManifests, Maintained, PublishesAfterLedgerCommit, Sink, TableSettings
from offsetbatch.sinks.files import groups, intents, maintenance, object_store
from offsetbatch.sinks.files.layout import CompactionLayout, TableLayout
from offsetbatch.sinks.rejected_files import RejectedFolders

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from offsetbatch.sinks.maintenance import Action, Horizon, MaintenanceSettings

MANIFEST_PUBLISHED = "commit.manifest_published"
log = logging.getLogger(__name__)



class FilesSink(PublishesAfterLedgerCommit, KeepsManifests, Maintained, Sink):
    type = "files"
    Settings = TableSettings

    def __init__(self, pipeline_name: str, settings: TableSettings):
        super().__init__(pipeline_name, settings)
        self.layout = self.staging = TableLayout(settings.path)
        self.rejected = RejectedFolders(settings.path)

    @property
    def target(self) -> str:
        return f"table {self.settings.path}"

    def asset_uri(self) -> str:
        """``file:///table`` for a local table, the table's own URI otherwise (``s3://…``)."""
        from offsetbatch.sinks.uris import ascii_uri

        return ascii_uri(self.settings.path if "://" in self.settings.path else f"file://{self.settings.path}")

    @classmethod
    def at(cls, table: str, pipeline_name: str = "", storage_conn_id: str | None = None) -> "FilesSink":
        """The sink of an existing table folder (readers and tools that have no pipeline config)."""
        return cls(pipeline_name, TableSettings(path=table, storage_conn_id=storage_conn_id))

    @property
    def in_place(self) -> bool:
        """Published where the job wrote it (an object store), not moved into the table."""
        return not storage.renames_are_cheap(self.settings.path)

    def publish(self, batch_id: int, output_id: int, attempt: str, superseded: Sequence[int] = (),
                kind: str = "") -> None:
        """Move the attempt's output into the table, replacing what was published before. Each step
        is a rename and the whole is idempotent. The batch's other attempts (crashed, or redundant
        re-executions of the same batch) are deleted; other batches' staging is not touched. On an
        object store: ``_publish_in_place``."""
        if self.in_place:
            return self._publish_in_place(batch_id, output_id, attempt)
        layout = self.layout
        self._leave_group(batch_id, output_id, attempt)
        group_folder = groups.is_group_folder(self, output_id)  # holds other batches' rows too
        moves = [
            (layout.staging_data(batch_id, attempt), layout.data(output_id)),
            (layout.staging_rejected(batch_id, attempt), self.rejected.of(output_id)),
            (layout.staging_manifest(batch_id, attempt), layout.manifest(output_id)),
        ]
        stamp = f"batch_id={output_id}-{time.time_ns()}"
        # the staged manifest, or (a publish finished after a crash) the one already published by it
        staged = layout.staging_manifest(batch_id, attempt)
        nothing = self._read_nothing(staged if storage.exists(staged) else layout.manifest(output_id), attempt)
        for i, (src, dst) in enumerate(moves):
            if not storage.exists(src) or (group_folder and i == 0):
                continue  # nothing staged, or ``_leave_group`` put the rows into the group's folder
            if storage.exists(dst):
                storage.move(dst, layout.trash(f"{stamp}-{i}"))
            if nothing and i < 2:
                continue  # a batch of no records (markers or aborted records only) leaves no empty folder behind
            storage.move(src, dst)
        if not storage.remove(layout.attempts(batch_id), best_effort=True):
            # two runs executed this batch at once: the other attempt is still writing; its own
            # commit finds the batch committed and discards its output
            log.info("%s: another attempt of this batch is still writing under %s; its commit discards it",
                     self.where(batch_id), layout.attempts(batch_id))
        storage.remove(layout.legacy_attempts(batch_id))
        storage.remove(f"{layout.meta}/trash")

    def _leave_group(self, batch_id: int, output_id: int, attempt: str) -> None:
        """Before publishing a replay of a compacted batch: finish any half-swapped compaction, then
        take the batch's old rows out of its group's folder (its new rows join the folder when the
        group has its id). Only when this attempt is staged and is not the one in the group already."""
        intents.finish_pending(self)
        staged = self.layout.staging_manifest(batch_id, attempt)
        if groups.group_of(self, output_id) is None or not storage.exists(staged):
            return
        ranges = [asdict(r) for r in Manifest.load(staged).ranges]
        groups.leave_group(self, output_id, attempt, joining=self.layout.staging_data(batch_id, attempt),
                                      ranges=ranges)

    def maintenance(self, policy: "MaintenanceSettings", horizon: "Horizon") -> list["Action"]:
        """Finish killed compactions, compact closed days, delete what retention allows
        (``sinks.files.maintenance``); planning changes nothing."""
        return maintenance.actions(self, policy, horizon)

    @staticmethod
    def _read_nothing(manifest_uri: str, attempt: str) -> bool:
        """Whether ``attempt`` read no record at all (its ranges held only transaction markers or
        aborted records): its published manifest is the marker, with no data or rejected folder."""
        if not storage.exists(manifest_uri):
            return False
        found = storage.read_json(manifest_uri)
        return (found.get("attempt") in (attempt, None) and found.get("rows_in") == 0 and not found.get("data_files")
                and found.get("rows_rejected") == 0)

    def _publish_in_place(self, batch_id: int, output_id: int, attempt: str) -> None:
        """The attempt's files stay where the job wrote them; the published manifest names them.
        Steps, each idempotent: finish a half-done group swap; for a compacted batch, its group takes
        the attempt's files (``object_store``); note the folder the manifest names
        now (it is replaced), write the new manifest (the publication), delete the batch's other
        attempts, then the noted folder."""
        layout, folder = self.layout, self.layout.attempt(batch_id, attempt)
        self._sweep()
        intents.finish_pending(self)
        current = self._published(output_id)
        staged = layout.staging_manifest(batch_id, attempt)
        if current is None or current.location != folder:
            manifest = Manifest.load(staged)
            manifest.location = folder
            object_store.replace_member(self, output_id, attempt, manifest)  # a compacted batch's replay
            if current is not None and current.location:
                self._note_trash(output_id, current.location)
            manifest.save(layout.manifest(output_id))
            faults.checkpoint(MANIFEST_PUBLISHED)
        for attempts in layout.attempt_folders(batch_id):
            for other in storage.children(attempts):
                if f"{attempts}/{other}" != folder:
                    self._remove_unless_published(f"{attempts}/{other}")
        self._sweep()

    def _remove_unless_published(self, folder: str) -> None:
        """Delete an attempt folder unless a published manifest names it: a replay's output stays in
        its batch's folder, and a ledger rebuilt from the manifests may give a later batch that id."""
        def named(staged: Manifest) -> bool:
            current = self._published(staged.output_id)
            return current is not None and current.location == folder
        self.remove_attempt_unless(folder, named)

    def discard(self, batch_id: int, attempt: str) -> None:
        if self.in_place:
            return self._remove_unless_published(self.layout.attempt(batch_id, attempt))
        super().discard(batch_id, attempt)

    def _published(self, output_id: int) -> Manifest | None:
        return Manifest.load_if_exists(self.layout.manifest(output_id))

    def _note_trash(self, output_id: int, folder: str) -> None:
        storage.write_json(self.layout.trash(f"output_id={output_id}-{time.time_ns()}.json"),
                           {"output_id": output_id, "folder": folder})

    def _sweep(self) -> None:
        """Delete the folders noted in ``_offsetbatch/trash/`` that no published manifest names any more."""
        for uri in storage.files(f"{self.layout.meta}/trash", suffix=".json"):
            note = storage.read_json(uri)
            current = self._published(note["output_id"])
            if current is None or current.location != note["folder"]:
                storage.remove(note["folder"])
            storage.remove(uri)

    def retire(self, output_id: int) -> None:
        if self.in_place:
            current = self._published(output_id)
            if current is not None and current.location:
                self._note_trash(output_id, current.location)
            intents.finish_pending(self)
            object_store.remove_member(self, output_id)  # its manifest first, then its group's files
            storage.remove(self.layout.manifest(output_id))
            self._sweep()
            return
        intents.finish_pending(self)
        groups.leave_group(self, output_id)
        if not groups.is_group_folder(self, output_id):  # else it holds other batches' rows
            storage.remove(self.layout.data(output_id))
        for path in (self.rejected.of(output_id), self.layout.manifest(output_id)):
            storage.remove(path)

    def published_ids(self) -> list[int]:
        return sorted(self._manifest_files())

    def published_manifests(self) -> dict[int, Manifest]:
        return {i: Manifest.load(uri) for i, uri in sorted(self._manifest_files().items())}

    def _manifest_files(self) -> dict[int, str]:
        found = {}
        for uri in storage.files(f"{self.layout.meta}/manifests", suffix=".json"):
            name = uri.rsplit("/", 1)[-1]
            if name.startswith("batch_id=") and name[len("batch_id="):-len(".json")].isdigit():
                found[int(name[len("batch_id="):-len(".json")])] = uri
        return found

    def describe(self, output_id: int) -> str:
        if self.in_place:
            return self.locations(output_id)["data"]
        return self._data_folder(output_id)

    def _data_folder(self, output_id: int) -> str:
        """Where ``output_id``'s rows are: its own folder, or its compaction group's."""
        group = groups.group_of(self, output_id)
        return self.layout.data(output_id if group is None else group)

    def locations(self, output_id: int) -> dict[str, str]:
        if self.in_place:
            current = self._published(output_id)
            folder = current.location if current and current.location else "(not published)"
            group = groups.group_of(self, output_id)
            data = (f"{folder}/data" if group is None
                    else f"the files {CompactionLayout(self.layout.meta).group(group)} names")
            return {"data": data, "rejected": f"{folder}/rejected", "manifest": self.layout.manifest(output_id)}
        return {"data": self._data_folder(output_id), "rejected": self.rejected.of(output_id),
                "manifest": self.layout.manifest(output_id)}

    def read_committed(self, spark: "SparkSession") -> "DataFrame":
        """Committed output, with ``batch_id`` (and ``event_date`` if configured) as partition columns."""
        if self.in_place:
            return self._read_manifests(spark, "data")
        return spark.read.parquet(self.settings.path)

    def read_rejected(self, spark: "SparkSession") -> "DataFrame":
        """kafka_topic/partition/offset/timestamp/key, raw_value, error, batch_id."""
        if self.in_place:
            return self._read_manifests(spark, "rejected")
        return spark.read.parquet(self.rejected.base)

    def _read_manifests(self, spark: "SparkSession", part: str) -> "DataFrame":
        """The files the published manifests name, each batch's with its output id as ``batch_id``
        (``event_date`` from the folder names, as a plain read of the table has it on a disk); a
        compacted day's from its group manifest, as ``batch_id = G`` (as on a disk)."""
        from functools import reduce

        from pyspark.sql import functions as F

        frames = []
        groups = object_store.group_manifests(self) if part == "data" else []  # listed first: see object_store
        for group in groups:
            for base, files in object_store.files_by_base(self, group).items():
                frames.append(spark.read.option("basePath", base).parquet(*files)
                              .withColumn("batch_id", F.lit(group.group)))
        grouped = {m for group in groups for m in group.members}
        for output_id, manifest in self.published_manifests().items():
            if output_id in grouped:
                continue
            files = manifest.data_files if part == "data" else manifest.rejected_files
            if files:
                base = f"{manifest.location}/{part}"
                frames.append(spark.read.option("basePath", base).parquet(*files)
                              .withColumn("batch_id", F.lit(output_id)))
        if not frames:
            raise FileNotFoundError(f"{self.where()}: no published batch yet (no manifest under {self.layout.meta}/manifests)")
        return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
