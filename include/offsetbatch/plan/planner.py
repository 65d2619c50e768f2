"""The planner: which offsets a run's batches read (docs/architecture.md, What each kind of run reads).

``plan_ranges`` is the arithmetic (pure, unit-tested); ``plan_for_run`` is the Airflow task's
logic, under the pipeline's ledger lock. For ``next`` (scheduled) runs it returns this run's batch
if it already has one, else the pending batch of an earlier run (re-executed unchanged), else plans
a new one from the frontier; after a rewind (``offsetbatch.plan.reset``) new batches re-read the
superseded batches whole, one at a time. Backfill and replay runs are planned by
``offsetbatch.plan.replay`` and never move the frontier.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

from offsetbatch.config import Caps
from offsetbatch.errors import DataLossError, PartitionVanishedError, TopicNotFoundError
from offsetbatch.ledger import Ledger, summaries
from offsetbatch.ledger.errors import SummarizedBatchError
from offsetbatch.pipeline import Pipeline
from offsetbatch.model import Batch, Gap, OffsetRange, TopicPartition
from offsetbatch.plan.replay import plan_window, replay_targets
from offsetbatch.plan.request import RunRequest
from offsetbatch.source.admin import KafkaAdmin, PartitionOffsets
from offsetbatch.source.partitions import check_vanished

log = logging.getLogger(__name__)
LOGGED_STARTS = 20  # new partitions named in the planner's log line; a 10,000-partition start is one event each


@dataclass(frozen=True)
class RunInfo:
    """The Airflow run asking for a plan."""

    dag_id: str
    run_id: str
    data_interval_start: datetime | None = None
    data_interval_end: datetime | None = None
    request: RunRequest = field(default_factory=RunRequest)
    run_type: str | None = None  # Airflow's: scheduled, manual, backfill, ... (kept with the batch)
    trigger: dict | None = None  # why the lag trigger started the run (``dag.input_asset.fired_by``)

    @property
    def ledger_fields(self) -> dict:
        """What the ledger keeps about the run with each batch it plans (and in the audit event)."""
        return {"dag_id": self.dag_id, "run_id": self.run_id, "run_type": self.run_type,
                "actor": self.request.actor, "reason": self.request.reason,
                "allow_more_rejected": self.request.allow_more_rejected}

    @property
    def cut_timestamp_ms(self) -> int | None:
        """Runs with a data interval read up to its end (by record timestamp); others to the log end."""
        return int(self.data_interval_end.timestamp() * 1000) if self.data_interval_end else None


@dataclass
class PlanResult:
    outcome: Literal["new", "same_run", "pending", "committed", "empty"]
    batches: list[Batch]
    gaps: list[Gap] = field(default_factory=list)

    @property
    def needs_work(self) -> bool:
        return self.outcome in ("new", "same_run", "pending")

    @property
    def batch(self) -> Batch | None:
        return self.batches[0] if self.batches else None


def fair_share(demand: dict[TopicPartition, int], budget: int) -> dict[TopicPartition, int]:
    """Split ``budget`` records over partitions: each gets an equal share, and what a small
    partition does not need goes to the others (water-filling). Deterministic."""
    grant = {tp: 0 for tp in demand}
    left = dict(demand)
    while budget > 0 and any(left.values()):
        hungry = sorted(tp for tp, d in left.items() if d > 0)
        share = max(budget // len(hungry), 1)
        for tp in hungry:
            take = min(share, left[tp], budget)
            grant[tp] += take
            left[tp] -= take
            budget -= take
            if budget == 0:
                break
    return grant


def plan_ranges(
    name: str,
    frontier: dict[TopicPartition, int],
    offsets: dict[TopicPartition, PartitionOffsets],
    caps: Caps,
    on_data_loss: str,
    use_cut: bool,
    limits: dict[TopicPartition, int] | None = None,
) -> tuple[list[OffsetRange], list[Gap]]:
    """Ranges ``[frontier, end)`` per partition, where end is the time cut (or log end) capped per
    partition and per batch (and by ``limits``, offsets not to reach); plus the gaps retention left,
    when the pipeline skips them.

    Raises ``DataLossError`` (fail policy) or ``PartitionVanishedError``; nothing is partial."""
    check_vanished(name, frontier, set(offsets))
    gaps: list[Gap] = []
    starts: dict[TopicPartition, int] = {}
    demand: dict[TopicPartition, int] = {}
    for tp in sorted(frontier):
        po, start = offsets[tp], frontier[tp]
        if start > po.latest:
            raise DataLossError(
                f"pipeline {name}: frontier {start} of {tp} is past the log end {po.latest}; the topic was "
                f"probably deleted and recreated. Nothing was planned. Move the frontier with 'offsetbatch reset'."
            )
        if start < po.earliest:
            if on_data_loss != "skip":
                raise DataLossError(
                    f"pipeline {name}: offsets [{start}, {po.earliest}) of {tp} were deleted by retention before "
                    f"they were read ({po.earliest - start} records lost). Nothing was planned. Either raise the "
                    f"topic's retention and restore the data, or set on_data_loss: skip to record the gap and go on."
                )
            gaps.append(Gap(tp.topic, tp.partition, start, po.earliest))
            start = po.earliest
        end = po.cut if use_cut and po.cut is not None else po.latest
        end = min(end, (limits or {}).get(tp, end))
        end = max(start, min(end, po.latest, start + caps.max_records_per_partition))
        starts[tp] = start
        demand[tp] = end - start
    grant = fair_share(demand, caps.max_records_per_batch)
    planned = [
        OffsetRange(tp.topic, tp.partition, starts[tp], starts[tp] + grant[tp], frontier_before=starts[tp])
        for tp in sorted(starts) if grant[tp] > 0
    ]
    return planned, gaps


# Brokers since Kafka 3.6 refuse records stamped more than 1 h ahead (log.message.timestamp.after.max.ms);
# a topic configured otherwise, or a LogAppendTime/CreateTime mix, can still hold one.
FUTURE_TOLERANCE_MS = 3_600_000


def lift_future_cuts(offsets: dict[TopicPartition, PartitionOffsets], frontier: dict[TopicPartition, int],
                     now_ms: int) -> tuple[dict[TopicPartition, PartitionOffsets], dict[TopicPartition, PartitionOffsets]]:
    """Kafka's time index is monotonic: once a record stamped in the future (a producer's wrong
    clock) is in a partition, every time cut before that timestamp lands on it. Once the frontier
    has reached it, the records after it would wait, unread, until the wall clock passes it. Such a
    partition is read to its log end instead. Returns the offsets to plan with, and the partitions
    lifted (as they were)."""
    lifted = {tp: po for tp, po in offsets.items()
              if po.cut is not None and po.cut_timestamp_ms is not None and po.cut_timestamp_ms > now_ms + FUTURE_TOLERANCE_MS
              and tp in frontier and po.cut <= frontier[tp] < po.latest}
    return {tp: (PartitionOffsets(po.earliest, po.latest, po.latest) if tp in lifted else po)
            for tp, po in offsets.items()}, lifted


def _start_offsets(pipeline: Pipeline, kafka: KafkaAdmin, new: set[TopicPartition],
                   offsets: dict[TopicPartition, PartitionOffsets]) -> dict[TopicPartition, int]:
    """Where new partitions start; ``offsets``: this plan's lookup, reused (at 10,000 partitions each
    broker lookup costs about 0.3 s of client CPU)."""
    cfg = pipeline.cfg
    if not new:
        return {}
    if cfg.starting_policy == "earliest":
        return {tp: offsets[tp].earliest for tp in new}
    if cfg.starting_policy == "latest":
        return {tp: offsets[tp].latest for tp in new}
    return kafka.offsets_for_time(new, cfg.start_timestamp_ms)


def refuse_a_summarized_run(ledger: Ledger, conn, name: str, run: RunInfo) -> None:
    """A run with no batch whose interval ended before the last batch ledger maintenance summarized
    is an old run cleared after its batch was summarized: re-running it cannot repeat the ranges it
    read, and planning the next batch under its old id would give today's records a past interval."""
    done = summaries.history_totals(conn, name)
    end = run.data_interval_end
    if done is None or done.last_committed_at is None or end is None:
        return
    last = done.last_committed_at if done.last_committed_at.tzinfo else done.last_committed_at.replace(tzinfo=timezone.utc)
    if end > last:
        return
    raise SummarizedBatchError(
        f"pipeline {name}: run {run.run_id} (interval ending {end.isoformat()}) has no batch in the ledger, and its "
        f"interval ends before the batches ledger maintenance summarized (committed until {last.isoformat()}, "
        f"maintenance.ledger_retain): it is an old run whose batch was summarized, so re-running it cannot repeat "
        f"what it read. Nothing was planned. Its records are in the target already; to read offsets again, rewind "
        f"(offsetbatch reset) after the summarized history, or trigger a new run.")


def plan_for_run(pipeline: Pipeline, ledger: Ledger, kafka: KafkaAdmin, run: RunInfo) -> PlanResult:
    """Decide this run's batch. Idempotent per Airflow run; serialized per pipeline by the ledger lock."""
    name = pipeline.name
    with ledger.lock(name) as conn:
        if run.request.mode in ("backfill", "replay"):
            return _plan_history(pipeline, ledger, conn, kafka, run)
        own = ledger.batch_for_run(conn, name, run.run_id)
        if own is not None:
            if own.status != "committed":
                check_batch_readable(name, own, kafka)
            outcome = "committed" if own.status == "committed" else "same_run"
            log.info("pipeline %s batch %d: run %s already planned it (%s); ranges unchanged: %s",
                     name, own.batch_id, run.run_id, own.status, own.describe_ranges())
            return PlanResult(outcome, [own])
        refuse_a_summarized_run(ledger, conn, name, run)
        if run.trigger is not None:  # the status and the UI say when the trigger last fired, and why
            ledger.event(conn, name, "run_triggered", {**run.trigger, "run_id": run.run_id})
        pending = ledger.pending(conn, name)
        if pending is not None:
            check_batch_readable(name, pending, kafka)
            log.warning("pipeline %s batch %d: planned by run %s but not committed; run %s executes it first, "
                        "unchanged: %s", name, pending.batch_id, pending.run_id, run.run_id, pending.describe_ranges())
            ledger.event(conn, name, "batch_resumed", {"by_run": run.run_id}, pending.batch_id)
            return PlanResult("pending", [pending])
        return _plan_next(pipeline, ledger, conn, kafka, run)


def _plan_next(pipeline: Pipeline, ledger: Ledger, conn, kafka: KafkaAdmin, run: RunInfo) -> PlanResult:
    """A new incremental batch from the frontier (under the lock ``plan_for_run`` holds): new
    partitions started by the pipeline's policy, superseded ranges re-read first, the cut and the
    caps applied, gaps recorded."""
    cfg = pipeline.cfg
    name, output_path = cfg.name, cfg.sink.root
    current = kafka.partitions(cfg.kafka.topics, cfg.kafka.pattern)
    if cfg.kafka.topics:
        missing = sorted(set(cfg.kafka.topics) - {tp.topic for tp in current})
        if missing:
            raise TopicNotFoundError(
                f"pipeline {name}: topic(s) {', '.join(missing)} do not exist on {kafka.bootstrap}. Nothing was "
                f"planned. Create them, or fix 'kafka.topics' in {cfg.source_file}."
            )
    frontier = ledger.frontier(conn, name)
    check_vanished(name, frontier, current)
    new = current - set(frontier)
    offsets = kafka.offsets(current, run.cut_timestamp_ms)  # every partition, once: the frontier's keys below
    starts = _start_offsets(pipeline, kafka, new, offsets)
    if starts:
        ledger.start_partitions(conn, name, starts, cfg.starting_policy)
        shown = [f"{tp}@{o}" for tp, o in sorted(starts.items())[:LOGGED_STARTS]]
        more = f", … {len(starts) - LOGGED_STARTS} more (the ledger's audit events list each)" \
            if len(starts) > LOGGED_STARTS else ""
        log.info("pipeline %s: %d new partition(s) start by policy %s: %s%s", name, len(starts),
                 cfg.starting_policy, ", ".join(shown), more)
        frontier.update(starts)

    superseded = ledger.superseded_pending(conn, name)
    if superseded:
        first = superseded[0]
        if all(frontier.get(r.tp) == r.from_offset for r in first.ranges):
            return _reread_superseded(ledger, conn, run, first, output_path)
    limits: dict[TopicPartition, int] = {}
    for b in superseded:  # fill up to the superseded batches, never into them
        for r in b.ranges:
            limits[r.tp] = min(limits.get(r.tp, r.from_offset), r.from_offset)

    offsets, lifted = lift_future_cuts(offsets, frontier, int(time.time() * 1000))
    for tp, po in sorted(lifted.items()):
        log.warning("pipeline %s: %s offset %d is stamped %s, more than 1 h ahead of now (a producer's clock?); "
                    "Kafka places every time cut before then at that record, so run %s reads %s to its log end "
                    "(%d) rather than leave the %d record(s) after the frontier waiting", name, tp, po.cut,
                    _iso_ms(po.cut_timestamp_ms), run.run_id, tp, po.latest, po.latest - frontier[tp])
    lag = sum(max(offsets[tp].latest - frontier[tp], 0) for tp in frontier if tp in offsets)
    planned, gaps = plan_ranges(name, frontier, offsets, cfg.caps, cfg.on_data_loss, run.cut_timestamp_ms is not None,
                                limits)
    for g in gaps:
        ledger.skip_gap(conn, name, g)
        log.warning("pipeline %s: offsets [%d, %d) of %s/%d were deleted by retention before being read; "
                    "skipped (on_data_loss: skip) and recorded as a gap", name, g.from_offset, g.until_offset,
                    g.topic, g.partition)
    if not planned:
        if lag:
            log.warning("pipeline %s: run %s reads nothing although %d record(s) wait past the frontier: they "
                        "are stamped at or after the cut %s, so the run of their own interval reads them (a "
                        "manual run, mode next, reads to the log end)", name, run.run_id, lag,
                        run.data_interval_end)
        else:
            log.info("pipeline %s: nothing new to read for run %s (cut %s); no batch planned", name, run.run_id,
                     run.data_interval_end or "log end")
        return PlanResult("empty", [], gaps)
    batch = ledger.insert_batch(conn, name, "incremental", planned, **run.ledger_fields,
                                interval=(run.data_interval_start, run.data_interval_end),
                                output_path=output_path, lag_at_plan=lag)
    log.info("pipeline %s batch %d: planned for run %s, %d records (lag was %d): %s", name, batch.batch_id,
             run.run_id, batch.records, lag, batch.describe_ranges())
    return PlanResult("new", [batch], gaps)


def check_batch_readable(name: str, batch: Batch, kafka: KafkaAdmin) -> None:
    """A planned batch whose partitions are gone (its topic deleted after planning), or whose ranges
    end past the log (the topic recreated), can never run: refuse it here, before a Spark job is
    submitted for it again on every run."""
    tps = {r.tp for r in batch.ranges}
    present = kafka.partitions(sorted({tp.topic for tp in tps}))
    ends = {tp: po.latest for tp, po in kafka.offsets(tps & present).items()}
    gone = [r for r in batch.ranges if r.tp not in present]
    beyond = [r for r in batch.ranges if r.tp in ends and r.until_offset > ends[r.tp]]
    if not gone and not beyond:
        return
    why = [f"{', '.join(map(str, gone))} no longer exist(s)"] if gone else []
    why += [f"{r} ends past the log end {ends[r.tp]} of {r.tp} (the topic was recreated?)" for r in beyond]
    raise PartitionVanishedError(
        f"pipeline {name} batch {batch.batch_id} can never run: {'; '.join(why)} on {kafka.bootstrap}. Nothing "
        f"was changed and no Spark job was submitted. If the topic was deleted or recreated on purpose, "
        f"'offsetbatch reset {name} --to latest --apply' abandons the batch and moves the frontier (audited; "
        f"a deleted topic must first exist again or leave kafka.topics).")


def _reread_superseded(ledger: Ledger, conn, run: RunInfo, old: Batch, output_path: str) -> PlanResult:
    """After a rewind: re-read a superseded batch's ranges whole; publishing the new batch retires the old output."""
    planned = [OffsetRange(r.topic, r.partition, r.from_offset, r.until_offset, frontier_before=r.from_offset)
               for r in old.ranges]
    batch = ledger.insert_batch(conn, old.pipeline, "incremental", planned, **run.ledger_fields,
                                interval=(run.data_interval_start, run.data_interval_end),
                                output_path=output_path)
    ledger.mark_superseded_by(conn, old.pipeline, old.batch_id, batch.batch_id)
    log.info("pipeline %s batch %d: planned for run %s, re-reading superseded batch %d (its output is replaced "
             "on commit): %s", old.pipeline, batch.batch_id, run.run_id, old.batch_id, batch.describe_ranges())
    return PlanResult("new", [batch])


def _plan_history(pipeline: Pipeline, ledger: Ledger, conn, kafka: KafkaAdmin, run: RunInfo) -> PlanResult:
    """A backfill or replay run: replay batches for recorded history, backfill batches for the rest."""
    cfg, req = pipeline.cfg, run.request
    name, output_path = cfg.name, cfg.sink.root
    own = ledger.planned_for_run(conn, name, run.run_id)
    if own:
        log.info("pipeline %s: run %s already planned batch(es) %s; re-executing them unchanged", name, run.run_id,
                 ", ".join(str(b.batch_id) for b in own))
        return PlanResult("same_run", own)
    if req.batch_ids:
        targets, history, interval = replay_targets(pipeline, ledger, conn, req.batch_ids), [], (None, None)
    else:
        targets, history = plan_window(pipeline, ledger, conn, kafka, req.window)
        interval = req.window
    out: list[Batch] = []
    pending = ledger.pending_replays(conn, name)
    for target in targets:
        if target.batch_id in pending:  # another run is replaying it right now: run that batch, not a second one
            b = pending[target.batch_id]
            ledger.event(conn, name, "batch_resumed", {"by_run": run.run_id,
                                                       "allow_more_rejected": req.allow_more_rejected}, b.batch_id)
            log.info("pipeline %s batch %d: replays batch %d for run %s and is not committed yet; run %s executes "
                     "it too (unchanged) instead of replaying batch %d again: %s", name, b.batch_id, target.batch_id,
                     b.run_id, run.run_id, target.batch_id, b.describe_ranges())
            out.append(b)
            continue
        b = ledger.insert_batch(conn, name, "replay", [], **run.ledger_fields,
                                interval=interval, output_path=output_path, target=target)
        log.info("pipeline %s batch %d: replays batch %d for run %s (same ranges, output replaced): %s", name,
                 b.batch_id, target.batch_id, run.run_id, b.describe_ranges())
        out.append(b)
    for ranges in history:
        b = ledger.insert_batch(conn, name, "backfill", ranges, **run.ledger_fields,
                                interval=interval, output_path=output_path)
        log.info("pipeline %s batch %d: backfills never-read history for run %s, %d records: %s", name, b.batch_id,
                 run.run_id, b.records, b.describe_ranges())
        out.append(b)
    if not out:
        what = f"batches {list(req.batch_ids)}" if req.batch_ids else \
            f"window [{req.window[0].isoformat()}, {req.window[1].isoformat()})"
        log.info("pipeline %s: %s holds no records; nothing to %s", name, what, req.mode)
        return PlanResult("empty", [])
    return PlanResult("new", out)


def _iso_ms(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat()
    except (OverflowError, OSError, ValueError):  # past year 9999
        return f"{ms} ms after the epoch"
