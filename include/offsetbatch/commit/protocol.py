"""The commit: check the job's manifest against the plan, then, in this order,

1. one ledger transaction under the pipeline lock: batch ``committed`` with its stats, frontier
   advanced by compare-and-set (docs/architecture.md, Invariants 3);
2. publish: the pipeline's sink makes exactly the committed attempt's output visible (the files
   sink renames it into ``<table>/batch_id=N``, replacing an earlier attempt's), then the ledger
   marks the batch published;
3. best effort: commit the new frontier to the pipeline's consumer group for lag tools.

Publishing after the transaction means a reader of the output can never see the output of an
uncommitted batch (invariant 5). A crash between 1 and 2 leaves a committed, unpublished batch;
``publish_pending`` rolls it forward, and every plan and commit calls it first.

A sink in the ledger's own database (``Sink.publishes_in_ledger_transaction``: the postgres sink)
publishes inside transaction 1 instead: batch row and frontier CAS, then the superseded batches'
output removed, then the batch's rows loaded, then ``published_at``, one ``COMMIT``. Readers see the
rows and the new frontier together or not at all, and there is nothing to roll forward.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import sqlalchemy as sa

from offsetbatch import faults, storage
from offsetbatch.config import PipelineConfig
from offsetbatch.errors import BatchStateError, ManifestError
from offsetbatch.jobspec import Manifest
from offsetbatch.ledger import Ledger
from offsetbatch.model import Batch, TopicPartition
from offsetbatch.sinks import Sink, sink_for
from offsetbatch.source.admin import KafkaAdmin

log = logging.getLogger(__name__)


@dataclass
class CommitResult:
    batch_id: int
    outcome: str  # "committed" | "already_committed"
    stats: dict


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


def publish_pending(cfg: PipelineConfig, ledger: Ledger, current: int | None = None) -> list[int]:
    """Publish committed batches whose output is not in the table yet: ``current`` (just
    committed) and any a crash left behind after its transaction (rolled forward). Under the
    pipeline lock, so two tasks never rename the same files at once."""
    done = []
    sink = sink_for(cfg.name, cfg.sink)
    with ledger.lock(cfg.name) as conn:
        for batch_id, output_id, attempt in ledger.unpublished(conn, cfg.name):
            if sink.publishes_in_ledger_transaction:  # not normally reached: such a commit publishes itself
                _publish_in_transaction(cfg, ledger, sink, conn, batch_id, output_id, attempt)
                done.append(batch_id)
                continue
            if sink.owner() is None:  # the first publish records which ledger owns the output
                sink.claim(ledger.identity)
            superseded = ledger.superseded_by(conn, cfg.name, batch_id)
            sink.publish(batch_id, output_id, attempt, superseded=superseded,
                         kind=ledger.get_batch(cfg.name, batch_id, conn).kind)
            for old in superseded:
                sink.retire(old)
                log.info("pipeline %s batch %d: output of superseded batch %d removed; batch %d re-read its ranges",
                         cfg.name, batch_id, old, batch_id)
            ledger.mark_published(conn, cfg.name, batch_id)
            if batch_id != current:
                log.warning("pipeline %s batch %d: was committed but not published; published it now", cfg.name, batch_id)
            done.append(batch_id)
    return done


def _publish_in_transaction(cfg: PipelineConfig, ledger: Ledger, sink: Sink, conn: sa.Connection, batch_id: int,
                            output_id: int, attempt: str) -> None:
    """Publish inside the ledger transaction ``conn``: superseded batches' output removed first
    (the new batch re-read their records; a unique constraint would refuse them twice), then the
    attempt's output loaded, then the batch marked published, all committed by the caller."""
    for old in ledger.superseded_by(conn, cfg.name, batch_id):
        sink.retire_in_transaction(conn, old)
        log.info("pipeline %s batch %d: output of superseded batch %d removed; batch %d re-read its ranges",
                 cfg.name, batch_id, old, batch_id)
    sink.publish_in_transaction(conn, batch_id, output_id, attempt, ledger.identity)
    ledger.mark_published(conn, cfg.name, batch_id)


def _already_committed(cfg: PipelineConfig, sink: Sink, batch: Batch, attempt: str) -> CommitResult:
    """A committed batch is left as is: this attempt's own earlier try, or another run's attempt
    (this attempt's output is then discarded)."""
    winner = batch.stats.get("committed_attempt")
    if winner == attempt:  # this task's own earlier try committed it (and published it)
        if sink.publishes_in_ledger_transaction:
            sink.cleanup(batch.batch_id)  # that try may have died between its COMMIT and the cleanup
        log.info("pipeline %s batch %d: already committed by this attempt (%s); nothing to do", cfg.name,
                 batch.batch_id, attempt)
    else:
        sink.discard(batch.batch_id, attempt)  # a redundant re-execution's output
        log.info("pipeline %s batch %d: already committed (attempt %s); output of attempt %s discarded",
                 cfg.name, batch.batch_id, winner, attempt)
    return CommitResult(batch.batch_id, "already_committed", batch.stats)


def commit_batch(cfg: PipelineConfig, ledger: Ledger, batch_id: int, attempt: str,
                 kafka: KafkaAdmin | None = None) -> CommitResult:
    """Commit the output of one finished Spark attempt of a batch. Idempotent: a committed batch is
    left as is, and a losing concurrent attempt's output is discarded."""
    t0 = time.monotonic()
    publish_pending(cfg, ledger)
    batch = ledger.get_batch(cfg.name, batch_id)
    sink = sink_for(cfg.name, cfg.sink)
    if batch.status == "committed":
        return _already_committed(cfg, sink, batch, attempt)
    if batch.status != "planned":
        raise BatchStateError(f"pipeline {cfg.name} batch {batch_id} is {batch.status}; only planned batches can be "
                              f"committed. Nothing was committed; 'offsetbatch batch {cfg.name} {batch_id}' shows why.")
    manifest_uri = sink.staging.staging_manifest(batch_id, attempt)
    if not storage.exists(manifest_uri):
        raise ManifestError(
            f"pipeline {cfg.name} batch {batch_id}: no manifest at {manifest_uri}, so the Spark job did not finish "
            f"({batch.describe_ranges()}). Nothing was committed. Re-run the spark_job task (its output is replaced)."
        )
    manifest = Manifest.load(manifest_uri)
    validate_manifest(batch, manifest, cfg.kafka.expect_offset_gaps)
    sink.check_publishable(batch_id, batch.output_id, attempt)
    faults.checkpoint("commit.before_transaction")

    stats = dict(committed_attempt=attempt, rows_in=manifest.rows_in, rows_out=manifest.rows_out,
                 rows_rejected=manifest.rows_rejected, bytes_in=manifest.bytes_in, job_seconds=manifest.job_seconds)
    range_stats = {TopicPartition(r.topic, r.partition): {"rows": r.rows, "rejected": r.rejected} for r in manifest.ranges}
    with ledger.lock(cfg.name) as conn:
        # Two runs may execute one pending batch at once (a resumed batch, a replay joined by a second
        # trigger); the one that waited for the lock finds it committed by the other and writes nothing.
        locked_view = ledger.get_batch(cfg.name, batch_id, conn)
        if locked_view.status != "committed":
            ledger.commit_batch(conn, batch, {**stats, "commit_seconds": round(time.monotonic() - t0, 3)}, range_stats)
            if sink.publishes_in_ledger_transaction:
                _publish_in_transaction(cfg, ledger, sink, conn, batch_id, batch.output_id, attempt)
            faults.checkpoint("commit.in_transaction")
    if locked_view.status == "committed":
        return _already_committed(cfg, sink, locked_view, attempt)
    log.info("pipeline %s batch %d (%s): committed%s: %s", cfg.name, batch_id, batch.kind,
             ", frontier advanced" if batch.moves_frontier else ", frontier untouched", batch.describe_ranges())
    faults.checkpoint("commit.after_transaction")

    if sink.publishes_in_ledger_transaction:
        sink.cleanup(batch_id)
    else:
        publish_pending(cfg, ledger, current=batch_id)
    log.info("pipeline %s batch %d: published to %s (%d rows, %d rejected)%s", cfg.name, batch_id,
             sink.describe(batch.output_id), manifest.rows_out, manifest.rows_rejected,
             f", replacing the output of batch {batch.target_batch_id}" if batch.target_batch_id else "")
    if kafka is not None and batch.moves_frontier:
        publish_progress(cfg, ledger, kafka)
    return CommitResult(batch_id, "committed", stats)


def publish_progress(cfg: PipelineConfig, ledger: Ledger, kafka: KafkaAdmin) -> bool:
    """Best effort: the ledger's frontier as the consumer group's committed offsets."""
    frontier = ledger.frontier_now(cfg.name)
    try:
        kafka.commit_group(cfg.group_id, frontier)
        return True
    except Exception as exc:  # noqa: BLE001 - progress publication must never fail a committed batch
        log.warning("pipeline %s: could not publish the frontier to consumer group %s (%s); the ledger is "
                    "unaffected and stays the source of truth", cfg.name, cfg.group_id, exc)
        return False
