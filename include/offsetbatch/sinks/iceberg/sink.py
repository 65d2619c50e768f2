"""``IcebergSink``: the seam's halves for an Iceberg table in a SQL catalog. The job half stages
Parquet Iceberg can register (microsecond timestamps, a ``batch_id`` column, one partition per
file); the commit half, after the ledger transaction, moves an attempt's files under the table's
location and commits them as one snapshot that also removes the rows they replace.

On an object store nothing is moved: the snapshot adds the files where the job wrote them (under
``sink.staging``'s attempt folder, which then holds table data and is never deleted while the table's
rows come from it). Iceberg readers see one snapshot: all of a batch or none of it.

A data file may hold several batches' rows once maintenance compacted it
(``sinks/iceberg/maintenance.py``): replacing or retiring a batch then rewrites such a file without
that batch's rows (copy-on-write) in the same snapshot, instead of dropping the whole file.
"""

from __future__ import annotations

import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Sequence

from offsetbatch import faults, storage
from offsetbatch.errors import SinkError, SinkSchemaError
from offsetbatch.jobspec import Manifest
from offsetbatch.sinks.base import (KeepsManifests, Maintained, PublishesAfterLedgerCommit, RejectedRows, Sink,
                                    StagedOutput)
from offsetbatch.sinks.iceberg import markers, schema
from offsetbatch.sinks.iceberg.catalog import open_catalog, warehouse_uri
from offsetbatch.sinks.iceberg.settings import IcebergSettings
from offsetbatch.sinks.keyed import check_staged

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

    from offsetbatch.sinks.maintenance import Action, Horizon, MaintenanceSettings

log = logging.getLogger(__package__)

OWNER_PROPERTY = "offsetbatch.owner"
AFTER_COMMIT = "commit.after_iceberg_commit"
AFTER_UPSERT = "commit.after_iceberg_upsert"  # upsert mode: the upserted table refreshed, the rejected one next
FOOTER_THREADS = 8  # Parquet footers read at once when registering a batch's files


class IcebergSink(PublishesAfterLedgerCommit, KeepsManifests, Maintained, Sink):
    type = "iceberg"
    Settings = IcebergSettings

    def __init__(self, pipeline_name: str, settings: IcebergSettings):
        super().__init__(pipeline_name, settings)
        self.settings: IcebergSettings = settings
        if settings.storage_conn_id:
            storage.bind_s3(settings.warehouse, settings.storage_conn_id)

    @property
    def table_name(self) -> str:
        return ".".join(self.settings.identifier)

    @property
    def target(self) -> str:
        return f"Iceberg table {self.table_name}"

    def asset_uri(self) -> str:
        """``iceberg://catalog/namespace/table``: the table's identifier in its catalog."""
        return f"iceberg://{self.settings.catalog_name}/{self.settings.namespace}/{self.settings.table}"

    def lineage_dataset(self) -> tuple[str, str]:
        from offsetbatch.sinks.uris import iceberg_dataset

        return iceberg_dataset(self.asset_uri())

    # ---- job half --------------------------------------------------------------------------

    def stage(self, spark: "SparkSession", data: "DataFrame", rejected: RejectedRows, batch_id: int,
              attempt: str, output_id: int | None = None) -> StagedOutput:
        """Parquet Iceberg can register: timestamps as INT64 microseconds (``write_staged``; Spark's
        default INT96 is not an Iceberg type), the output id as ``batch_id`` in every row (a replay's files are found
        and replaced by it), and the rows of each partition of ``partition_by`` in files of their own."""
        from pyspark.sql import functions as F

        if schema.BATCH_ID in data.columns:
            raise SinkSchemaError(f"{self.where(batch_id)}: the transform's output has a column 'batch_id', which "
                                  f"the iceberg sink fills itself with the batch id. Rename it in the transform. "
                                  f"Nothing was committed.")
        check_staged(self.settings, dict(data.dtypes), self.where(batch_id))
        out_id = batch_id if output_id is None else output_id
        data = data.withColumn(schema.BATCH_ID, F.lit(out_id).cast("long"))
        data, hidden = schema.stage_partitions(data, self.settings.partitions, self.where(batch_id))
        return self.write_staged(spark, data, rejected.map(lambda r: r.withColumn(schema.BATCH_ID, F.lit(out_id).cast("long"))),
                                 batch_id, attempt, hidden)

    # ---- commit half -------------------------------------------------------------------------

    def check_writable(self) -> None:
        """Before the plan opens the ledger: a table written in the other mode, or upserted by another
        key, is refused naming both (``upsert.check_mode``), before any Spark job."""
        from offsetbatch.sinks.iceberg import upsert

        ident = self.settings.identifier
        with open_catalog(self.settings, self.pipeline_name) as catalog:
            upsert.check_mode(_load(catalog, ident), self.settings.upserts,
                              self.where(target=f"Iceberg table {'.'.join(ident)}"), self.settings.key or ())

    def check_publishable(self, batch_id: int, output_id: int, attempt: str) -> None:
        """Before the ledger transaction: a batch whose columns the table cannot take fails here,
        while it is still planned (after the transaction it could never be published)."""
        manifest = Manifest.load(self.staging.staging_manifest(batch_id, attempt))
        with open_catalog(self.settings, self.pipeline_name) as catalog:
            from offsetbatch.sinks.iceberg import upsert

            ident = self.settings.identifier
            upsert.check_mode(_load(catalog, ident), self.settings.upserts,
                              self.where(batch_id, f"Iceberg table {'.'.join(ident)}"), self.settings.key or ())
            for ident, files in ((self.settings.marked_identifier, manifest.data_files),
                                 (self.settings.rejected_identifier, manifest.rejected_files)):
                table = _load(catalog, ident)
                if table is not None and files:
                    schema.check(table.schema(), storage.parquet_schema(files[0]),
                                 self.where(batch_id, f"Iceberg table {'.'.join(ident)}"))

    def publish(self, batch_id: int, output_id: int, attempt: str, superseded: Sequence[int] = (),
                kind: str = "") -> None:
        """One snapshot per table (rows, then rejected records) that adds the attempt's files and
        removes the rows of ``output_id`` and of ``superseded`` batches. A table whose history
        already has batch ``batch_id``'s snapshot is skipped, so a crash anywhere is finished by
        calling this again; the staging folder goes last, so its manifest is there until both
        tables are done."""
        manifest_uri = self.staging.staging_manifest(batch_id, attempt)
        if not storage.exists(manifest_uri):
            log.info("%s: already published (its staging is gone)", self.where(batch_id))
            return
        manifest = Manifest.load(manifest_uri)
        retired = sorted(set(superseded) - {output_id})
        with open_catalog(self.settings, self.pipeline_name) as catalog:
            for ident, part, files in ((self.settings.marked_identifier, "data", manifest.data_files),
                                       (self.settings.rejected_identifier, "rejected", manifest.rejected_files)):
                self._publish_table(catalog, ident, part, files, batch_id, output_id, attempt, kind, manifest, retired)
                faults.checkpoint(AFTER_COMMIT)
                if part == "data":
                    self._refresh_upserted(catalog, batch_id)
        if self.in_place:
            for attempts in self.staging.attempt_folders(batch_id):
                for other in storage.children(attempts):
                    if f"{attempts}/{other}" != self.staging.attempt(batch_id, attempt):
                        self._remove_unless_live(f"{attempts}/{other}")
        else:
            for attempts in self.staging.attempt_folders(batch_id):
                storage.remove(attempts)

    @property
    def in_place(self) -> bool:
        """On an object store the snapshot adds the files where the job wrote them (a move there is a
        copy of every object); on a disk they are moved under the table's location first."""
        return not storage.renames_are_cheap(self.settings.staging)

    def _remove_unless_live(self, folder: str) -> None:
        """Delete an attempt folder unless the table's current rows come from it (a replay's files
        stay in its batch's folder; a ledger rebuilt from the snapshots may reuse that batch id)."""
        def live(staged: Manifest) -> bool:
            marker = self._live().get(staged.output_id)
            return marker is not None and marker.attempt == staged.attempt
        self.remove_attempt_unless(folder, live)

    def discard(self, batch_id: int, attempt: str) -> None:
        if self.in_place:
            return self._remove_unless_live(self.staging.attempt(batch_id, attempt))
        super().discard(batch_id, attempt)

    def _publish_table(self, catalog: "SqlCatalog", ident: tuple[str, str], part: str, files: list[str],
                       batch_id: int, output_id: int, attempt: str, kind: str, manifest: Manifest,
                       retired: list[int]) -> None:
        name = ".".join(ident)
        where = self.where(batch_id, f"Iceberg table {name}")
        table = _load(catalog, ident)
        if table is not None and (done := markers.applied(table, batch_id)) is not None:
            log.info("%s: already holds this batch (snapshot %d); not added again", where, done.snapshot_id)
            return
        replaced = [output_id, *retired]
        deletes, kept = _replacing(table, replaced) if table is not None else ([], [])
        location = table.location() if table is not None else f"{warehouse_uri(self.settings.warehouse)}/{ident[0]}/{ident[1]}"
        if self.in_place:
            paths = [re.sub(r"^s3a://", "s3://", f) for f in files]  # the scheme every Iceberg reader knows
        else:
            src = (self.staging.staging_data if part == "data" else self.staging.staging_rejected)(batch_id, attempt)
            dst = f"{location}/data/batch_id={output_id}/attempt={attempt}"
            if storage.exists(src):
                storage.remove(dst)  # left by a crash between an earlier move and its commit
                storage.move(src, dst)
            marker = f"attempt={attempt}/{part}/"
            paths = [f"{dst}/{f.rsplit(marker, 1)[1]}" for f in files]
        if not paths and not deletes:
            return  # nothing to add or remove (no rejected records, say): no snapshot
        staged = storage.parquet_schema(paths[0]) if paths else None
        if table is None:
            from pyiceberg.table import TableProperties

            catalog.create_namespace_if_not_exists(ident[0])
            owner = Sink.owner(self)
            tx = catalog.create_table_transaction(
                ident, schema=schema.optional(staged), location=location,
                properties={OWNER_PROPERTY: json.dumps(owner)} if owner else {})
            # merged appends: a batch adds a manifest, and pyiceberg merges them once 100 are
            # listed (its defaults), so a table of large batches, never compacted, still lists few
            tx.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                                 tx.table_metadata.schema().name_mapping.model_dump_json(),
                                 TableProperties.MANIFEST_MERGE_ENABLED: "true"})
            if part == "data":
                schema.partition_spec(tx, self.settings.partitions)
            changed = ["(new table)"]
        else:
            if staged is not None:
                schema.check(table.schema(), staged, where)
            tx = table.transaction()
            changed = schema.evolve(tx, staged) if staged is not None else []
        added = [f for f in _data_files(tx, paths) if f.record_count > 0]
        props = markers.summary(self.pipeline_name, batch_id, output_id, kind, manifest, retired)
        update = tx.update_snapshot(snapshot_properties=props)
        with (update.overwrite() if deletes else update.merge_append()) as snapshot:
            for f in deletes:
                snapshot.delete_data_file(f)
            for f in [*added, *kept]:
                snapshot.append_data_file(f)
        tx.commit_transaction()
        log.info("%s: snapshot %s adds %d file(s) (%d rows)%s%s", where, _current_id(catalog, ident), len(added),
                 sum(f.record_count for f in added),
                 f", removes {len(deletes)} file(s) of batch(es) {', '.join(map(str, replaced))}"
                 f"{f' ({len(kept)} rewritten with the rows of other batches)' if kept else ''}" if deletes else "",
                 f"; columns changed: {', '.join(changed)}" if changed else "")

    def _refresh_upserted(self, catalog: "SqlCatalog", batch_id: int | None) -> None:
        """Upsert mode: bring the table readers query up to the table of changes (after every
        snapshot of the latter; a crash before it is finished by the next publish)."""
        if not self.settings.upserts:
            return
        from offsetbatch.sinks.iceberg import upsert

        rule = upsert.UpsertRule(self.settings.key, self.settings.version_column, self.settings.delete_column)
        ident = self.settings.identifier
        upsert.refresh(catalog, self.settings.marked_identifier, ident, rule,
                       self.where(batch_id, f"Iceberg table {'.'.join(ident)}"),
                       f"{warehouse_uri(self.settings.warehouse)}/{ident[0]}/{ident[1]}", self.settings.partitions)
        faults.checkpoint(AFTER_UPSERT)

    def retire(self, output_id: int) -> None:
        """Remove a superseded batch's rows (normally already removed by the snapshot that re-read
        them; this finds nothing then)."""
        with open_catalog(self.settings, self.pipeline_name) as catalog:
            for ident in (self.settings.marked_identifier, self.settings.rejected_identifier):
                table = _load(catalog, ident)
                deletes, kept = _replacing(table, [output_id]) if table is not None else ([], [])
                if not deletes:
                    continue
                tx = table.transaction()
                with tx.update_snapshot(snapshot_properties=markers.retirement(self.pipeline_name, [output_id])) \
                        .overwrite() as snapshot:
                    for f in deletes:
                        snapshot.delete_data_file(f)
                    for f in kept:
                        snapshot.append_data_file(f)
                tx.commit_transaction()
            self._refresh_upserted(catalog, None)  # also when nothing was deleted: a crash may have left it behind

    def maintenance(self, policy: "MaintenanceSettings", horizon: "Horizon") -> list["Action"]:
        """Snapshot expiry (markers archived first), file deletion, orphans and compaction of every
        table the sink owns (``sinks/iceberg/maintenance.py``); listing them changes nothing."""
        from offsetbatch.sinks.iceberg import maintenance

        return maintenance.plan(self, policy, horizon)

    def published_ids(self) -> list[int]:
        return sorted(self._live())

    def published_manifests(self) -> dict[int, Manifest]:
        """From the snapshot summaries (ranges and counts; the file lists are the table's)."""
        return {i: m.manifest() for i, m in sorted(self._live().items())}

    def _live(self) -> dict[int, markers.Published]:
        with open_catalog(self.settings, self.pipeline_name) as catalog:
            table = _load(catalog, self.settings.marked_identifier)
            return markers.live(table) if table is not None else {}

    def owner(self) -> dict | None:
        """The table's ``offsetbatch.owner`` property; before the table exists, the claim recorded
        next to the staging area (the first publish copies it into the new table)."""
        with open_catalog(self.settings, self.pipeline_name) as catalog:
            table = _load(catalog, self.settings.marked_identifier)
            if table is not None and OWNER_PROPERTY in table.properties:
                return json.loads(table.properties[OWNER_PROPERTY])
        return super().owner()

    def claim(self, ledger_id: str) -> None:
        super().claim(ledger_id)
        owner = {"ledger_id": ledger_id, "pipeline": self.pipeline_name,
                 "claimed_at": datetime.now(timezone.utc).isoformat()}
        with open_catalog(self.settings, self.pipeline_name) as catalog:
            table = _load(catalog, self.settings.marked_identifier)
            if table is not None:
                table.transaction().set_properties(**{OWNER_PROPERTY: json.dumps(owner)}).commit_transaction()

    def describe(self, output_id: int) -> str:
        return f"Iceberg table {self.settings.catalog_name}.{self.table_name}"

    def locations(self, output_id: int) -> dict[str, str]:
        """The table and the snapshot that holds ``output_id``'s rows now (``offsetbatch batch``)."""
        return self.locations_of([output_id])[output_id]

    def locations_of(self, output_ids: list[int]) -> dict[int, dict[str, str]]:
        table_name = f"{self.settings.catalog_name}.{self.table_name}"
        out = {i: {"table": table_name, "output": table_name} for i in output_ids}
        try:
            with open_catalog(self.settings, self.pipeline_name) as catalog:
                for key, ident in (("snapshot", self.settings.marked_identifier),
                                   ("rejected_snapshot", self.settings.rejected_identifier)):
                    table = _load(catalog, ident)
                    live = markers.live(table) if table is not None else {}
                    for i in output_ids:
                        if i in live:
                            out[i][key] = str(live[i].snapshot_id)
                            if key == "snapshot":
                                out[i]["output"] = f"{table_name} @ snapshot {live[i].snapshot_id}"
                        if key == "snapshot" and table is not None:
                            out[i]["location"] = table.location()
        except SinkError as exc:
            for i in output_ids:
                out[i]["error"] = str(exc)
        return out

    # ---- read path --------------------------------------------------------------------------

    def read_committed(self, spark: "SparkSession") -> "DataFrame":
        """The current snapshot's files through Spark's Parquet source (Spark 4.3 has no Iceberg
        runtime), with the table's schema: columns added later read as null in older files."""
        return self._read(spark, self.settings.identifier)

    def read_rejected(self, spark: "SparkSession") -> "DataFrame":
        return self._read(spark, self.settings.rejected_identifier)

    def _read(self, spark: "SparkSession", ident: tuple[str, str]) -> "DataFrame":
        from pyiceberg.io.pyarrow import schema_to_pyarrow
        from pyspark.sql.pandas.types import from_arrow_schema

        with open_catalog(self.settings, self.pipeline_name) as catalog:
            table = _load(catalog, ident)
            if table is None:
                raise SinkError(f"{self.where()}: {'.'.join(ident)} does not exist yet (no batch published)")
            struct = from_arrow_schema(schema_to_pyarrow(table.schema(), include_field_ids=False))
            paths = [t.file.file_path for t in table.scan().plan_files()]
        if not paths:
            return spark.createDataFrame([], struct)
        return spark.read.schema(struct).parquet(*paths)


def _load(catalog: "SqlCatalog", ident: tuple[str, str]) -> "Table | None":
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(ident)
    except NoSuchTableError:
        return None


def _current_id(catalog: "SqlCatalog", ident: tuple[str, str]) -> int | None:
    snapshot = catalog.load_table(ident).current_snapshot()
    return snapshot.snapshot_id if snapshot else None


def _live_files(table: "Table", output_ids: list[int]) -> list:
    """Data files of the current snapshot that may hold rows of ``output_ids`` (by their
    ``batch_id`` bounds)."""
    from pyiceberg.expressions import In

    if table.current_snapshot() is None:
        return []
    return [task.file for task in table.scan(row_filter=In(schema.BATCH_ID, output_ids)).plan_files()]


def _replacing(table: "Table", output_ids: list[int]) -> "tuple[list[DataFile], list[DataFile]]":
    """What a snapshot replacing ``output_ids`` does to the current files: the files to delete and,
    for each that also holds other batches' rows (a compacted file), new files with those rows
    (copy-on-write; written now, added by the caller's snapshot). A file whose ``batch_id`` bounds
    are one replaced id is dropped whole, unread; one holding none of their rows is left alone."""
    from pyiceberg.expressions import In, Not

    from offsetbatch.sinks.iceberg.rewrite import batch_bounds, read_rows, write_rows

    deletes: list = []
    kept: list = []
    for f in _live_files(table, output_ids):
        if _only(batch_bounds(table, f), output_ids):
            deletes.append(f)
            continue
        rows = read_rows(table.metadata, table.io, [f], Not(In(schema.BATCH_ID, output_ids)))
        if rows.num_rows == f.record_count:
            continue  # its bounds span a replaced id, its rows are all other batches': left as it is
        deletes.append(f)
        if rows.num_rows:
            kept.extend(write_rows(table.metadata, table.io, rows))
    return deletes, kept


def _only(bounds: tuple[int, int] | None, output_ids: list[int]) -> bool:
    return bounds is not None and bounds[0] == bounds[1] and bounds[0] in output_ids


def _data_files(tx, paths: list[str]) -> list:
    """``DataFile`` entries (statistics, partition values) of Parquet files, read from their
    footers in parallel: the part of ``add_files`` that does not commit."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    if not paths:
        return []
    io, metadata = tx._table.io, tx.table_metadata
    with ThreadPoolExecutor(min(FOOTER_THREADS, len(paths))) as pool:
        return list(pool.map(lambda p: parquet_file_to_data_file(io, metadata, p), paths))
