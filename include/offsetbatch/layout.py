"""Where a table's files live. Readers of ``<table>`` see only published batches: everything
unpublished sits under ``_offsetbatch/``, which Spark's file sources skip (names starting with
``_`` or ``.`` are hidden from ``spark.read.parquet``).

    <table>/batch_id=N/[event_date=D/]part-*.parquet     committed output (the read path)
    <table>/_rejected/batch_id=N/part-*.parquet           committed rejected records
    <table>/_offsetbatch/plans/batch_id=N.json            job spec of batch N
    <table>/_offsetbatch/staging/batch_id=N/attempt=A/{data,rejected,_manifest.json}   job output, unpublished
    <table>/_offsetbatch/manifests/batch_id=N.json        manifest of the published output
    <table>/_offsetbatch/trash/                            replaced output, deleted after publishing
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TableLayout:
    root: str

    @property
    def meta(self) -> str:
        return f"{self.root}/_offsetbatch"

    def spec(self, batch_id: int) -> str:
        return f"{self.meta}/plans/batch_id={batch_id}.json"

    def staging(self, batch_id: int) -> str:
        return f"{self.meta}/staging/batch_id={batch_id}"

    def attempt(self, batch_id: int, attempt: str) -> str:
        """One Spark attempt's own folder: concurrent or crashed attempts never share files."""
        return f"{self.staging(batch_id)}/attempt={attempt}"

    def staging_data(self, batch_id: int, attempt: str) -> str:
        return f"{self.attempt(batch_id, attempt)}/data"

    def staging_rejected(self, batch_id: int, attempt: str) -> str:
        return f"{self.attempt(batch_id, attempt)}/rejected"

    def staging_manifest(self, batch_id: int, attempt: str) -> str:
        return f"{self.attempt(batch_id, attempt)}/_manifest.json"

    def data(self, batch_id: int) -> str:
        return f"{self.root}/batch_id={batch_id}"

    def rejected_root(self) -> str:
        return f"{self.root}/_rejected"

    def rejected(self, batch_id: int) -> str:
        return f"{self.rejected_root()}/batch_id={batch_id}"

    def manifest(self, batch_id: int) -> str:
        return f"{self.meta}/manifests/batch_id={batch_id}.json"

    def trash(self, name: str) -> str:
        return f"{self.meta}/trash/{name}"
