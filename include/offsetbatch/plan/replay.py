"""Backfills and replays: re-run history exactly, from what the ledger recorded (docs/architecture.md,
What each kind of run reads).

For a time window ``[start, end)`` (an Airflow backfill run's data interval, or a replay request):

* offsets of the window that committed batches read: those batches are **re-executed** (a
  ``replay`` batch per target: same ranges, today's code, its output replaces the target's);
* offsets before the pipeline's first planned offset that nothing read yet: **new** ``backfill``
  batches, never overlapping an existing range, bounded by the earliest offset still in Kafka;
* offsets at or after the frontier: **refused**, since reading them is the scheduled runs' job.

Neither kind moves the frontier. ``model.subtract`` and ``pack`` are the pure arithmetic.
"""

from __future__ import annotations

import logging
from datetime import datetime

import sqlalchemy as sa

from offsetbatch.config import Caps
from offsetbatch.errors import BackfillRefusedError, DataLossError, RunRequestError
from offsetbatch.ledger import Ledger
from offsetbatch.pipeline import Pipeline
from offsetbatch.model import Batch, OffsetRange, TopicPartition, subtract
from offsetbatch.source.admin import KafkaAdmin
from offsetbatch.source.partitions import check_vanished

log = logging.getLogger(__name__)


def pack(pieces: dict[TopicPartition, list[tuple[int, int]]], caps: Caps) -> list[list[OffsetRange]]:
    """Batches of at most one range per partition, within the per-partition and per-batch caps."""
    queues: dict[TopicPartition, list[tuple[int, int]]] = {}
    chunk = min(caps.max_records_per_partition, caps.max_records_per_batch)
    for tp, spans in pieces.items():
        queues[tp] = [(a, min(a + chunk, b)) for s0, b in spans for a in range(s0, b, chunk)]
    out: list[list[OffsetRange]] = []
    while any(queues.values()):
        budget, batch = caps.max_records_per_batch, []
        for tp in sorted(queues):
            if queues[tp] and queues[tp][0][1] - queues[tp][0][0] <= budget:
                a, b = queues[tp].pop(0)
                batch.append(OffsetRange(tp.topic, tp.partition, a, b))
                budget -= b - a
        out.append(batch)
    return out


def _ms(ts: datetime) -> int:
    return int(ts.timestamp() * 1000)


def plan_window(pipeline: Pipeline, ledger: Ledger, conn: sa.Connection, kafka: KafkaAdmin,
                window: tuple[datetime, datetime]) -> tuple[list[Batch], list[list[OffsetRange]]]:
    """(committed batches to re-execute, new history ranges to read) for ``window``; raises
    ``BackfillRefusedError`` or ``DataLossError`` before anything is planned."""
    cfg = pipeline.cfg
    name, (start, end) = cfg.name, window
    where = f"pipeline {name}: window [{start.isoformat()}, {end.isoformat()})"
    bounds = ledger.frontier_full(conn, name)
    if not bounds:
        raise BackfillRefusedError(f"{where}: the pipeline has not planned anything yet, so there is no history to "
                                   f"backfill. Let a scheduled (or 'mode: next') run start it first.")
    check_vanished(name, {tp: nxt for tp, (_, nxt) in bounds.items()},
                   kafka.partitions(cfg.kafka.topics, cfg.kafka.pattern))
    offsets = kafka.offsets(bounds.keys(), _ms(end))
    lows = kafka.offsets_for_time(bounds.keys(), _ms(start))
    in_use: dict[TopicPartition, list[tuple[int, str, OffsetRange]]] = {}
    for batch_id, status, r in ledger.ranges_in_use(conn, name):
        in_use.setdefault(r.tp, []).append((batch_id, status, r))

    after, targets, history, lost = [], set(), {}, []
    for tp, (first, nxt) in sorted(bounds.items()):
        lo, hi = lows[tp], offsets[tp].cut
        if lo >= hi:
            continue
        if hi > nxt:
            after.append(f"{tp} offsets [{max(lo, nxt)}, {hi}) (frontier {nxt})")
        for batch_id, status, r in in_use.get(tp, []):
            if r.from_offset < hi and r.until_offset > lo and status == "committed":
                targets.add(batch_id)
        free = subtract((lo, min(hi, first)), [(r.from_offset, r.until_offset) for _, _, r in in_use.get(tp, [])])
        if free:
            history[tp] = free
            if free[0][0] == offsets[tp].earliest > 0:
                lost.append(f"{tp} before offset {offsets[tp].earliest}")
    if after:
        raise BackfillRefusedError(
            f"{where} reaches records the pipeline has not read yet: {'; '.join(after)}. Nothing was planned. "
            f"Scheduled runs read those; backfill or replay only intervals before the frontier "
            f"('offsetbatch status {name}')."
        )
    if lost and cfg.on_data_loss != "skip":
        raise DataLossError(
            f"{where} starts before the earliest records still in Kafka ({'; '.join(lost)}): retention deleted "
            f"older offsets, some of which may belong to the window. Nothing was planned. Start the window later, "
            f"or set on_data_loss: skip to backfill what is left."
        )
    for item in lost:
        log.warning("%s: %s was deleted by retention; backfilling what is left (on_data_loss: skip)", where, item)
    found = ledger.batches_by_id(conn, name, sorted(targets)) if targets else {}
    return [found[i] for i in sorted(found)], pack(history, cfg.caps)


def replay_targets(pipeline: Pipeline, ledger: Ledger, conn: sa.Connection, batch_ids: tuple[int, ...]) -> list[Batch]:
    """The committed batches a ``batch_ids`` replay re-executes (a replay's id means its target)."""
    cfg = pipeline.cfg
    found = ledger.batches_by_id(conn, cfg.name, list(batch_ids))
    missing = [i for i in batch_ids if i not in found]
    if missing:
        raise RunRequestError(f"pipeline {cfg.name}: batch id(s) {', '.join(map(str, missing))} do not exist in the "
                           f"ledger ('offsetbatch batches {cfg.name}' lists them). Nothing was changed.")
    targets: dict[int, Batch] = {}
    for i in batch_ids:
        b = found[i]
        if b.target_batch_id is not None:
            b = ledger.get_batch(cfg.name, b.target_batch_id, conn)
        if b.status != "committed":
            hint = {"planned": "it is not committed yet; clear its Airflow run instead",
                    "superseded": "a reset rewound over it; the next runs re-read its offsets",
                    "abandoned": "it was abandoned by a reset"}.get(b.status, "")
            raise RunRequestError(f"pipeline {cfg.name}: batch {b.batch_id} is {b.status} and cannot be replayed: "
                               f"{hint}. Nothing was changed.")
        targets[b.batch_id] = b
    pipeline.sink.check_reread(sorted(targets), "a replay")
    return [targets[i] for i in sorted(targets)]
