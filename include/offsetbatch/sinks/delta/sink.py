"""``DeltaSink``: the seam's halves for a Delta Lake table, written by delta-rs (no JVM). The job
half stages Parquet with a ``batch_id`` column, as for Iceberg; the commit half, after the ledger
transaction, writes the staged rows into the table as **one Delta commit** per table (rows, then
rejected records) that carries the batch's application transaction and marker
(``sinks/delta/markers.py``). A replay's or a rewind's commit also removes the rows of the output
ids it replaces (delta-rs's ``replaceWhere``: files holding only those rows are dropped, files
holding others too are rewritten without them), so readers see the old rows or the new, never both.

delta-rs writes the table's own files (statistics, partition folders, its file names) from the
staged ones: Spark 4.3 has no Delta runtime, and a Delta file must be the table's to be compacted
and vacuumed like the rest. The staging is removed once both tables have the batch.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterator, Sequence

from offsetbatch import faults, storage
from offsetbatch.errors import SinkError, SinkSchemaError
from offsetbatch.jobspec import Manifest
from offsetbatch.sinks.base import (KeepsManifests, Maintained, PublishesAfterLedgerCommit, RejectedRows, Sink,
                                    StagedOutput)
from offsetbatch.sinks.delta import markers, schema
from offsetbatch.sinks.delta.settings import DeltaSettings
from offsetbatch.sinks.delta.table import CONFIGURATION, delta_uri, hooks, open_table, storage_options
from offsetbatch.sinks.keyed import check_staged
from offsetbatch.sinks.markers import Published, retirement, summary

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

    from offsetbatch.sinks.maintenance import Action, Horizon, MaintenanceSettings

log = logging.getLogger(__package__)

CHECKED = "commit.delta_checked"  # the table read and checked, the commit not sent (a racing writer's window)
AFTER_COMMIT = "commit.after_delta_commit"
AFTER_UPSERT = "commit.after_delta_upsert"
COMMIT_ATTEMPTS = 5  # a commit that lost to another writer (maintenance, a second task) checks again


class DeltaSink(PublishesAfterLedgerCommit, KeepsManifests, Maintained, Sink):
    type = "delta"
    Settings = DeltaSettings

    def __init__(self, pipeline_name: str, settings: DeltaSettings):
        super().__init__(pipeline_name, settings)
        self.settings: DeltaSettings = settings
        if settings.storage_conn_id:
            storage.bind_s3(settings.table, settings.storage_conn_id)
        self._options: dict[str, str] | None = None
        self._options_read = False
        self._opened: dict[str, DeltaTable] = {}  # location -> the table, brought forward by open()

    @property
    def options(self) -> dict[str, str] | None:
        """delta-rs's storage options, read from the connection when first needed (never at parse time)."""
        if not self._options_read:
            self._options, self._options_read = storage_options(self.settings), True
        return self._options

    @property
    def target(self) -> str:
        return f"Delta table {self.settings.table}"

    def asset_uri(self) -> str:
        """The table's location as a URI (``file:///…``, ``s3://…``): what Delta readers open."""
        from offsetbatch.sinks.uris import ascii_uri

        t = delta_uri(self.settings.table)
        return ascii_uri(t if "://" in t else f"file://{t}")

    def rejected_lineage_dataset(self) -> tuple[str, str]:
        from offsetbatch.sinks.uris import location_dataset

        return location_dataset(self.settings.rejected_table)

    def open(self, location: str) -> "DeltaTable | None":
        """The table at its newest version. Loaded once per sink and then brought forward by
        reading only the log entries after it: loading materializes every data file's entry (51 ms at
        2,880 files), and a commit asks up to five times."""
        table = self._opened.get(location)
        if table is not None:
            table.update_incremental()
            return table
        table = open_table(location, self.options)
        if table is not None:
            self._opened[location] = table
        return table

    # ---- job half --------------------------------------------------------------------------

    def stage(self, spark: "SparkSession", data: "DataFrame", rejected: RejectedRows, batch_id: int,
              attempt: str, output_id: int | None = None) -> StagedOutput:
        """Parquet with the output id as ``batch_id`` in every row (a replay's rows are found and
        replaced by it) and microsecond timestamps (``write_staged``), unpartitioned: delta-rs writes
        the table's partition folders itself."""
        from pyspark.sql import functions as F

        if schema.BATCH_ID in data.columns:
            raise SinkSchemaError(f"{self.where(batch_id)}: the transform's output has a column 'batch_id', which "
                                  f"the delta sink fills itself with the batch id. Rename it in the transform. "
                                  f"Nothing was committed.")
        absent = [c for c in self.settings.partition_by if c not in data.columns]
        if absent:
            raise SinkSchemaError(f"{self.where(batch_id)}: sink.partition_by column(s) {', '.join(absent)} are not in "
                                  f"the transform's output ({', '.join(data.columns)}). Fix sink.partition_by or the "
                                  f"transform. Nothing was committed.")
        check_staged(self.settings, dict(data.dtypes), self.where(batch_id))
        out_id = batch_id if output_id is None else output_id
        with_id = lambda frame: frame.withColumn(schema.BATCH_ID, F.lit(out_id).cast("long"))  # noqa: E731
        return self.write_staged(spark, with_id(data), rejected.map(with_id), batch_id, attempt, [])

    # ---- commit half -------------------------------------------------------------------------

    def _tables(self, manifest: Manifest) -> list[tuple[str, str, list[str]]]:
        return [(self.settings.marked_table, "data", manifest.data_files),
                (self.settings.rejected_table, "rejected", manifest.rejected_files)]

    def check_writable(self) -> None:
        """Before the plan opens the ledger: a table written in the other mode is refused, naming it."""
        from offsetbatch.sinks.delta import upsert

        upsert.check_mode(self.open(self.settings.table), self.settings, self.where(target=self.target))

    def check_publishable(self, batch_id: int, output_id: int, attempt: str) -> None:
        """Before the ledger transaction: a batch whose columns a table cannot take fails here, while
        it is still planned (after the transaction it could never be published)."""
        from offsetbatch.sinks.delta import upsert

        manifest = Manifest.load(self.staging.staging_manifest(batch_id, attempt))
        upsert.check_mode(self.open(self.settings.table), self.settings, self.where(batch_id, self.target))
        for location, _, files in self._tables(manifest):
            table = self.open(location)
            if table is not None and files:
                schema.check(_arrow(table), storage.parquet_schema(files[0]), self.where(batch_id, f"Delta table {location}"))

    def publish(self, batch_id: int, output_id: int, attempt: str, superseded: Sequence[int] = (),
                kind: str = "") -> None:
        """One commit per table that adds the attempt's rows and removes those of ``output_id`` and
        of ``superseded`` batches; a table that already has batch ``batch_id`` is skipped, so a
        crash anywhere is finished by calling this again. The staging goes last."""
        manifest_uri = self.staging.staging_manifest(batch_id, attempt)
        if not storage.exists(manifest_uri):
            log.info("%s: already published (its staging is gone)", self.where(batch_id))
            return
        manifest = Manifest.load(manifest_uri)
        retired = sorted(set(superseded) - {output_id})
        for location, part, files in self._tables(manifest):
            self._publish_table(location, part, files, batch_id, output_id, kind, manifest, retired)
            faults.checkpoint(AFTER_COMMIT)
            if part == "data":
                self._refresh_upserted(batch_id)
        for attempts in self.staging.attempt_folders(batch_id):
            storage.remove(attempts)

    def _publish_table(self, location: str, part: str, files: list[str], batch_id: int, output_id: int, kind: str,
                       manifest: Manifest, retired: list[int]) -> None:
        from deltalake import CommitProperties, Transaction, write_deltalake
        from deltalake.exceptions import CommitFailedError

        where = self.where(batch_id, f"Delta table {location}")
        replaced = [output_id, *retired]
        replacing = output_id != batch_id or bool(retired)
        props = summary(self.pipeline_name, batch_id, output_id, kind, manifest, retired)
        for attempt_no in range(1, COMMIT_ATTEMPTS + 1):
            table = self.open(location)
            if table is not None and (done := markers.applied(table, location, self.pipeline_name, batch_id)):
                log.info("%s: already holds this batch (version %d); not added again", where, done.snapshot_id)
                return
            faults.checkpoint(CHECKED)
            reached = table.transaction_version(markers.app_id(self.pipeline_name)) if table is not None else None
            commit = CommitProperties(
                custom_metadata=props, max_commit_retries=0,  # land on the version checked, or check again
                app_transactions=[Transaction(markers.app_id(self.pipeline_name), max(batch_id, reached or 0))])
            try:
                if not files:  # nothing staged for this table (no rejected records): only what it replaces goes
                    if table is not None and replacing:
                        table.delete(f"{schema.BATCH_ID} IN ({', '.join(map(str, replaced))})", commit_properties=commit,
                                     post_commithook_properties=hooks())
                    return
                if table is not None:
                    schema.check(_arrow(table), storage.parquet_schema(files[0]), where)
                rows = _staged_rows(files)
                write_deltalake(
                    table if table is not None else delta_uri(location), rows, storage_options=self.options,
                    mode="overwrite" if replacing and table is not None else "append",
                    predicate=(f"{schema.BATCH_ID} IN ({', '.join(map(str, replaced))})"
                               if replacing and table is not None else None),
                    schema_mode="merge", partition_by=(self.settings.partition_by or None) if part == "data" else None,
                    configuration=CONFIGURATION if table is None else None, commit_properties=commit,
                    post_commithook_properties=hooks())
            except FileNotFoundError as exc:  # a second writer of this batch published it and removed the staging
                if attempt_no == COMMIT_ATTEMPTS:
                    raise SinkError(f"{where}: the batch's staged files are gone ({exc}) and the table does not hold "
                                    f"it; replay the batch (offsetbatch replay) to stage it again") from exc
                log.warning("%s: staged files gone (%s); checking the table again", where, exc)
                continue
            except CommitFailedError as exc:
                if attempt_no == COMMIT_ATTEMPTS:
                    raise SinkError(f"{where}: {COMMIT_ATTEMPTS} commits of this batch lost to other writers of the "
                                    f"table ({exc}); the batch stays committed and unpublished, and the next commit or "
                                    f"plan publishes it. Look for a writer outside offsetbatch") from exc
                log.warning("%s: another writer committed first (%s); checking the table again", where, exc)
                continue
            version = table.version() if table is not None else 0  # delta-rs brings the object to its commit
            log.info("%s: version %d adds batch %d's rows (output %d)%s", where, version, batch_id, output_id,
                     f", replacing batch(es) {', '.join(map(str, replaced))}" if replacing else "")
            return

    def _refresh_upserted(self, batch_id: int | None) -> None:
        """Upsert mode: bring the keyed table up to the table of changes (after each of the
        latter's commits; a crash before it is finished by the next publish)."""
        if not self.settings.upserts:
            return
        from offsetbatch.sinks.delta import upsert

        upsert.refresh(self, self.where(batch_id, self.target))
        faults.checkpoint(AFTER_UPSERT)

    def retire(self, output_id: int) -> None:
        """Remove a superseded batch's rows (normally already removed by the commit that re-read
        them; delta-rs then finds nothing and commits nothing)."""
        from deltalake import CommitProperties

        for location in (self.settings.marked_table, self.settings.rejected_table):
            table = self.open(location)
            if table is not None:
                table.delete(f"{schema.BATCH_ID} = {int(output_id)}", post_commithook_properties=hooks(),
                             commit_properties=CommitProperties(custom_metadata=retirement(self.pipeline_name, [output_id])))
        self._refresh_upserted(None)

    def maintenance(self, policy: "MaintenanceSettings", horizon: "Horizon") -> list["Action"]:
        """Compaction, vacuum, a checkpoint and log cleanup (markers archived first) of every table
        the sink owns (``sinks/delta/maintenance.py``); listing them changes nothing."""
        from offsetbatch.sinks.delta import maintenance

        return maintenance.plan(self, policy, horizon)

    def published_ids(self) -> list[int]:
        return sorted(self._live())

    def published_manifests(self) -> dict[int, Manifest]:
        """From the commits' markers (ranges and counts; the file lists are the table's)."""
        return {i: m.manifest() for i, m in sorted(self._live().items())}

    def _live(self) -> dict[int, Published]:
        table = self.open(self.settings.marked_table)
        return markers.live(table, self.settings.marked_table) if table is not None else {}

    def describe(self, output_id: int) -> str:
        return self.target

    def locations_of(self, output_ids: list[int]) -> dict[int, dict[str, str]]:
        """The table and the version that holds each output's rows now (``offsetbatch batch``, UI)."""
        out = {i: {"table": self.settings.table, "output": self.target} for i in output_ids}
        try:
            live = self._live()
        except (SinkError, OSError) as exc:
            for i in output_ids:
                out[i]["error"] = str(exc)
            return out
        for i in output_ids:
            if i in live:
                out[i]["version"] = str(live[i].snapshot_id)
                out[i]["output"] = f"{self.target} @ version {live[i].snapshot_id}"
        return out

    def locations(self, output_id: int) -> dict[str, str]:
        return self.locations_of([output_id])[output_id]

    # ---- read path --------------------------------------------------------------------------

    def read_committed(self, spark: "SparkSession") -> "DataFrame":
        """The current version's files through Spark's Parquet source (Spark 4.3 has no Delta
        runtime), with the table's schema: columns added later read as null in older files."""
        return self._read(spark, self.settings.table)

    def read_rejected(self, spark: "SparkSession") -> "DataFrame":
        return self._read(spark, self.settings.rejected_table)

    def _read(self, spark: "SparkSession", location: str) -> "DataFrame":
        from pyspark.sql.pandas.types import from_arrow_schema

        table = self.open(location)
        if table is None:
            raise SinkError(f"{self.where()}: Delta table {location} does not exist yet (no batch published)")
        struct = from_arrow_schema(_arrow(table))
        paths = [_hadoop(p) for p in table.file_uris()]
        if not paths:
            return spark.createDataFrame([], struct)
        return spark.read.schema(struct).parquet(*paths)


def _arrow(table: "DeltaTable") -> "pa.Schema":
    import pyarrow as pa

    return pa.schema(table.schema().to_arrow())


def _hadoop(uri: str) -> str:
    """A file URI delta-rs gives (``s3://``) as Spark's Hadoop S3A client reads it."""
    return "s3a://" + uri.partition("://")[2] if uri.startswith("s3://") else uri


def _staged_rows(files: list[str]) -> "pa.RecordBatchReader":
    """The staged files' rows, one file at a time (memory: the largest file, not the batch)."""
    import pyarrow as pa

    staged = storage.parquet_schema(files[0]) if files else pa.schema([])
    first = pa.schema([f.with_nullable(True) for f in staged])  # a later batch may lack a column

    def batches() -> Iterator["pa.RecordBatch"]:
        for f in files:
            yield from storage.read_parquet(f).cast(first).to_batches()

    return pa.RecordBatchReader.from_batches(first, batches())
