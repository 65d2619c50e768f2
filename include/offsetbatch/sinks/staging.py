"""Where a pipeline's own files live: job specs, one folder per Spark attempt, manifests.

Every sink stages the same way (the job half writes Parquet here); sinks differ only in how they
publish. The area sits under ``<root>/_offsetbatch/``, which Spark's and pyarrow's file readers skip
(names starting with ``_`` or ``.`` are hidden), so it never shows in a Parquet table next to it.

    <root>/_offsetbatch/plans/batch_id=N.json                                 job spec of batch N
    <root>/_offsetbatch/attempts/batch_id=N/attempt=A/{data,rejected,_manifest.json}   one attempt's output
    <root>/_offsetbatch/trash/                                                replaced output, deleted after publishing
    <root>/_offsetbatch/owner.json                                            which ledger and pipeline own the output

An attempt's folder is not always temporary: where publishing is a metadata operation (an Iceberg
snapshot, a published manifest on an object store) the published files stay in the attempt that
wrote them, so the folder is named for what it holds, not "staging". Tables written before that
have their attempts under ``_offsetbatch/staging/`` (``LEGACY_ATTEMPTS``): published manifests and
snapshots name their files' full paths, so they read as before, and cleanup removes both.
"""

from __future__ import annotations

from dataclasses import dataclass

ATTEMPTS = "attempts"
LEGACY_ATTEMPTS = "staging"  # the attempts folder of tables written before 0.2


@dataclass(frozen=True)
class StagingLayout:
    root: str

    @property
    def meta(self) -> str:
        return f"{self.root}/_offsetbatch"

    def spec(self, batch_id: int) -> str:
        return f"{self.meta}/plans/batch_id={batch_id}.json"

    def attempts(self, batch_id: int) -> str:
        """Every attempt of one batch (a replay stages under its own id, not its target's)."""
        return f"{self.meta}/{ATTEMPTS}/batch_id={batch_id}"

    def legacy_attempts(self, batch_id: int) -> str:
        """Where an earlier offsetbatch put the batch's attempts (``LEGACY_ATTEMPTS``)."""
        return f"{self.meta}/{LEGACY_ATTEMPTS}/batch_id={batch_id}"

    def attempt_folders(self, batch_id: int) -> tuple[str, str]:
        """The batch's attempts folder and its legacy one: what cleaning up a batch looks in."""
        return self.attempts(batch_id), self.legacy_attempts(batch_id)

    def attempt(self, batch_id: int, attempt: str) -> str:
        """One Spark attempt's own folder: concurrent or crashed attempts never share files."""
        return f"{self.attempts(batch_id)}/attempt={attempt}"

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
