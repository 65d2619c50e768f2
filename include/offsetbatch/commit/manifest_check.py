"""The commit's first check: the manifest of exactly this task's attempt against the batch's plan.
Every planned partition reported, the read range equal to the plan, every offset inside it,
``rows == until - from`` on plain topics, every listed file present. A mismatch commits nothing."""

from __future__ import annotations

from offsetbatch import storage
from offsetbatch.errors import ManifestError
from offsetbatch.jobspec import Manifest
from offsetbatch.model import Batch


def validate_manifest(batch: Batch, manifest: Manifest, expect_offset_gaps: bool) -> None:
    """Every planned range is accounted for, every offset inside it, and counts reconcile."""
    where = f"pipeline {batch.pipeline} batch {batch.batch_id}"
    if manifest.output_id != batch.output_id or manifest.pipeline != batch.pipeline:
        raise ManifestError(f"{where}: the manifest is for {manifest.pipeline} batch {manifest.output_id}")
    planned = {(r.topic, r.partition): r for r in batch.ranges}
    reported = {(r.topic, r.partition): r for r in manifest.ranges}
    if set(planned) != set(reported):
        raise ManifestError(
            f"{where}: the manifest covers partitions {sorted(reported)} but the plan has {sorted(planned)}. "
            f"Re-run the spark_job task to rewrite the batch."
        )
    for key, r in planned.items():
        m = reported[key]
        if (m.from_offset, m.until_offset) != (r.from_offset, r.until_offset):
            raise ManifestError(f"{where}: the job read {m.topic}/{m.partition}[{m.from_offset},{m.until_offset}) "
                                f"but the plan is {r}. Re-run the spark_job task.")
        seen = (m.min_offset, m.max_offset) if m.rows and m.min_offset is not None else None
        if m.outside or (seen and (seen[0] < r.from_offset or seen[1] >= r.until_offset)):
            what = f"{m.outside} record(s)" if m.outside else f"offsets {seen[0]}..{seen[1]}"
            raise ManifestError(f"{where}: {what} of {r.topic}/{r.partition} lie outside the planned {r}. The "
                                f"output is not committed; report this as a bug.")
        if m.rows > r.size or (m.rows < r.size and not expect_offset_gaps):
            raise ManifestError(
                f"{where}: {r} holds {r.size} offsets but the job read {m.rows} records. On a plain topic they must "
                f"be equal; if the topic is compacted or transactional set kafka.expect_offset_gaps: true. "
                f"Nothing was committed."
            )
    if manifest.rows_in != sum(m.rows for m in manifest.ranges):
        raise ManifestError(f"{where}: manifest rows_in {manifest.rows_in} != sum of its ranges")
    for f in manifest.data_files + manifest.rejected_files:
        if not storage.exists(f):
            raise ManifestError(f"{where}: file {f} listed in the manifest is missing. Re-run the spark_job task.")
