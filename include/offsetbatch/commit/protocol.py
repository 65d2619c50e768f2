"""The commit of one finished Spark attempt of a batch, in this order:

1. roll forward any batch a crash left committed but unpublished (``publication.publish_pending``);
2. check the attempt's manifest against the plan (``manifest_check``), a replay's rejections
   against the output it replaces (``replay_guard``), then the sink's ``check_publishable``: a
   batch the sink could never publish is refused while still planned;
3. one ledger transaction under the pipeline lock: batch ``committed`` with its stats, frontier
   advanced by compare-and-set (docs/architecture.md, *Invariants* 3), and whatever the
   publication strategy does inside it;
4. the publication strategy's step after the transaction (``publication``): publish and mark
   published, or clean up the staging of a batch published inside the transaction;
5. best effort: the new frontier to the pipeline's consumer group for lag tools (``source.progress``).

The batch's status is read again once the lock is held: two runs can execute one pending batch at
once, and the one that waited for the lock finds it committed by the other, writes nothing and
discards its own attempt's output.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from offsetbatch import faults, storage
from offsetbatch.commit import replay_guard
from offsetbatch.commit.manifest_check import validate_manifest
from offsetbatch.commit.publication import Publication, publication_for, publish_pending
from offsetbatch.errors import BatchStateError, ManifestError
from offsetbatch.jobspec import Manifest
from offsetbatch.ledger import Ledger
from offsetbatch.model import Batch, TopicPartition
from offsetbatch.pipeline import Pipeline
from offsetbatch.source.admin import KafkaAdmin
from offsetbatch.source.progress import publish_progress

log = logging.getLogger(__name__)


@dataclass
class CommitResult:
    batch_id: int
    outcome: str  # "committed" | "already_committed"
    stats: dict
    ranges: list[str]  # the batch's offset ranges, "topic/partition[from,until)"
    record_span_us: tuple[int, int] | None = None  # the records' first and last Kafka timestamps (this commit's)


def _already_committed(pipeline: Pipeline, publication: Publication, batch: Batch, attempt: str) -> CommitResult:
    """A committed batch is left as is: this attempt's own earlier try, or another run's attempt
    (this attempt's output is then discarded)."""
    winner = batch.stats.get("committed_attempt")
    if winner == attempt:  # this task's own earlier try committed it (and published it)
        publication.settle(batch.batch_id)
        log.info("pipeline %s batch %d: already committed by this attempt (%s); nothing to do", pipeline.name,
                 batch.batch_id, attempt)
    else:
        pipeline.sink.discard(batch.batch_id, attempt)  # a redundant re-execution's output
        log.info("pipeline %s batch %d: already committed (attempt %s); output of attempt %s discarded",
                 pipeline.name, batch.batch_id, winner, attempt)
    return CommitResult(batch.batch_id, "already_committed", batch.stats, [str(r) for r in batch.ranges])


def commit_batch(pipeline: Pipeline, ledger: Ledger, batch_id: int, attempt: str,
                 kafka: KafkaAdmin | None = None) -> CommitResult:
    """Commit the output of one finished Spark attempt of a batch. Idempotent: a committed batch is
    left as is, and a losing concurrent attempt's output is discarded."""
    t0 = time.monotonic()
    cfg, sink, publication = pipeline.cfg, pipeline.sink, publication_for(pipeline, ledger)
    publish_pending(pipeline, ledger)
    batch = ledger.get_batch(cfg.name, batch_id)
    if batch.status == "committed":
        return _already_committed(pipeline, publication, batch, attempt)
    if batch.status != "planned":
        raise BatchStateError(f"pipeline {cfg.name} batch {batch_id} is {batch.status}; only planned batches can be "
                              f"committed. Nothing was committed; 'offsetbatch batch {cfg.name} {batch_id}' shows why.")
    manifest_uri = sink.staging.staging_manifest(batch_id, attempt)
    legacy = f"{sink.staging.legacy_attempts(batch_id)}/attempt={attempt}/_manifest.json"
    if not storage.exists(manifest_uri) and storage.exists(legacy):
        raise ManifestError(
            f"pipeline {cfg.name} batch {batch_id}: attempt {attempt} was staged by an earlier offsetbatch, under "
            f"{legacy}, which this version does not publish from ({batch.describe_ranges()}). Nothing was committed. "
            f"Clear this run's spark_job task: it stages the batch again, and this commit publishes it.")
    if not storage.exists(manifest_uri):
        raise ManifestError(
            f"pipeline {cfg.name} batch {batch_id}: no manifest at {manifest_uri}, so the Spark job did not finish "
            f"({batch.describe_ranges()}). Nothing was committed. Re-run the spark_job task (its output is replaced)."
        )
    manifest = Manifest.load(manifest_uri)
    validate_manifest(batch, manifest, cfg.kafka.expect_offset_gaps)
    replay_guard.check_rejections(ledger, batch, manifest)
    sink.check_publishable(batch_id, batch.output_id, attempt)
    faults.checkpoint("commit.before_transaction")

    stats = dict(committed_attempt=attempt, rows_in=manifest.rows_in, rows_out=manifest.rows_out,
                 rows_rejected=manifest.rows_rejected, bytes_in=manifest.bytes_in, job_seconds=manifest.job_seconds)
    range_stats = {TopicPartition(r.topic, r.partition): {"rows": r.rows, "rejected": r.rejected} for r in manifest.ranges}
    with ledger.lock(cfg.name) as conn:
        locked_view = ledger.get_batch(cfg.name, batch_id, conn)
        if locked_view.status != "committed":
            ledger.commit_batch(conn, batch, {**stats, "commit_seconds": round(time.monotonic() - t0, 3)}, range_stats)
            publication.within_commit(conn, batch_id, batch.output_id, attempt)
            faults.checkpoint("commit.in_transaction")
    if locked_view.status == "committed":
        return _already_committed(pipeline, publication, locked_view, attempt)
    log.info("pipeline %s batch %d (%s): committed%s: %s", cfg.name, batch_id, batch.kind,
             ", frontier advanced" if batch.moves_frontier else ", frontier untouched", batch.describe_ranges())
    faults.checkpoint("commit.after_transaction")

    publication.after_commit(batch_id)
    log.info("pipeline %s batch %d: published to %s (%d rows, %d rejected)%s", cfg.name, batch_id,
             sink.describe(batch.output_id), manifest.rows_out, manifest.rows_rejected,
             f", replacing the output of batch {batch.target_batch_id}" if batch.target_batch_id else "")
    if kafka is not None and batch.moves_frontier:
        publish_progress(cfg.name, cfg.group_id, ledger, kafka)
    span = ((manifest.first_record_us, manifest.last_record_us)
            if manifest.first_record_us is not None and manifest.last_record_us is not None else None)
    return CommitResult(batch_id, "committed", stats, [str(r) for r in batch.ranges], span)
