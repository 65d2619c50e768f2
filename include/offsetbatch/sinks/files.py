"""The ``files`` sink: a Parquet table of one folder per batch, published by renames.

    <table>/batch_id=N/[event_date=D/]part-*.parquet     committed output (the read path)
    <table>/_rejected/batch_id=N/part-*.parquet           committed rejected records
    <table>/_offsetbatch/manifests/batch_id=N.json        manifest of the published output (the marker)
    <table>/_offsetbatch/...                               staging (``StagingLayout``)

Readers of ``<table>`` see only published batches: everything unpublished sits under
``_offsetbatch/``, which Spark's and pyarrow's file sources skip. A batch is published after its
ledger transaction, so ``spark.read.parquet(table)`` never shows an uncommitted batch. A replay of
batch N replaces the folder ``batch_id=N`` (a rename at a time: a reader listing the table during
that rename can see neither version of N; table formats with snapshots avoid that).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Sequence

from offsetbatch import storage
from offsetbatch.jobspec import Manifest
from offsetbatch.sinks.base import KeepsManifests, PublishesAfterLedgerCommit, Sink, SinkSettings
from offsetbatch.sinks.rejected_files import RejectedFolders
from offsetbatch.sinks.staging import StagingLayout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class TableLayout(StagingLayout):
    """The staging area plus the published paths of a Parquet-folder table."""

    def data(self, output_id: int) -> str:
        return f"{self.root}/batch_id={output_id}"

    def manifest(self, output_id: int) -> str:
        return f"{self.meta}/manifests/batch_id={output_id}.json"


class FilesSink(PublishesAfterLedgerCommit, KeepsManifests, Sink):
    type = "files"
    Settings = SinkSettings

    def __init__(self, pipeline: str, settings: SinkSettings):
        super().__init__(pipeline, settings)
        self.layout = self.staging = TableLayout(settings.path)
        self.rejected = RejectedFolders(settings.path)

    @property
    def target(self) -> str:
        return f"table {self.settings.path}"

    def asset_uri(self) -> str:
        """``file:///table`` for a local table, the table's own URI otherwise (``s3://…``)."""
        return self.settings.path if "://" in self.settings.path else f"file://{self.settings.path}"

    @classmethod
    def at(cls, table: str, pipeline: str = "") -> "FilesSink":
        """The sink of an existing table folder (readers and tools that have no pipeline config)."""
        return cls(pipeline, SinkSettings(path=table))

    def publish(self, batch_id: int, output_id: int, attempt: str, superseded: Sequence[int] = (),
                kind: str = "") -> None:
        """Move the attempt's output into the table, replacing what was published before. Each step
        is a rename and the whole is idempotent. The batch's other attempts (crashed, or redundant
        re-executions of the same batch) are deleted; other batches' staging is not touched."""
        layout = self.layout
        moves = [
            (layout.staging_data(batch_id, attempt), layout.data(output_id)),
            (layout.staging_rejected(batch_id, attempt), self.rejected.of(output_id)),
            (layout.staging_manifest(batch_id, attempt), layout.manifest(output_id)),
        ]
        stamp = f"batch_id={output_id}-{time.time_ns()}"
        for i, (src, dst) in enumerate(moves):
            if not storage.exists(src):
                continue
            if storage.exists(dst):
                storage.move(dst, layout.trash(f"{stamp}-{i}"))
            storage.move(src, dst)
        storage.remove(layout.staging(batch_id))
        storage.remove(f"{layout.meta}/trash")

    def retire(self, output_id: int) -> None:
        for path in (self.layout.data(output_id), self.rejected.of(output_id), self.layout.manifest(output_id)):
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

    def is_published(self, output_id: int, attempt: str) -> bool:
        uri = self.layout.manifest(output_id)
        return storage.exists(uri) and Manifest.load(uri).attempt == attempt

    def describe(self, output_id: int) -> str:
        return self.layout.data(output_id)

    def locations(self, output_id: int) -> dict[str, str]:
        return {"data": self.layout.data(output_id), "rejected": self.rejected.of(output_id),
                "manifest": self.layout.manifest(output_id)}

    def read_committed(self, spark: "SparkSession") -> "DataFrame":
        """Committed output, with ``batch_id`` (and ``event_date`` if configured) as partition columns."""
        return spark.read.parquet(self.settings.path)

    def read_rejected(self, spark: "SparkSession") -> "DataFrame":
        """kafka_topic/partition/offset/timestamp/key, raw_value, error, batch_id."""
        return spark.read.parquet(self.rejected.base)
