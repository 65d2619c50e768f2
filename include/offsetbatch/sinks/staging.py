"""Where a pipeline's unpublished files live: job specs, one folder per Spark attempt, manifests.

Every sink stages the same way (the job half writes Parquet here); sinks differ only in how they
publish. The staging area sits under ``<root>/_offsetbatch/``, which Spark's and pyarrow's file
readers skip (names starting with ``_`` or ``.`` are hidden), so staging next to a Parquet table
never shows in it.

    <root>/_offsetbatch/plans/batch_id=N.json                               job spec of batch N
    <root>/_offsetbatch/staging/batch_id=N/attempt=A/{data,rejected,_manifest.json}   one attempt's output
    <root>/_offsetbatch/trash/                                              replaced output, deleted after publishing
    <root>/_offsetbatch/owner.json                                          which ledger and pipeline own the output
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StagingLayout:
    root: str

    @property
    def meta(self) -> str:
        return f"{self.root}/_offsetbatch"

    def spec(self, batch_id: int) -> str:
        return f"{self.meta}/plans/batch_id={batch_id}.json"

    def staging(self, batch_id: int) -> str:
        """Every attempt of one batch (a replay stages under its own id, not its target's)."""
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

    def job_error(self, batch_id: int, attempt: str) -> str:
        """Where a failing job leaves its last error for the task's failure line."""
        return f"{self.attempt(batch_id, attempt)}/_error.json"

    @property
    def owner(self) -> str:
        return f"{self.meta}/owner.json"

    def trash(self, name: str) -> str:
        return f"{self.meta}/trash/{name}"
