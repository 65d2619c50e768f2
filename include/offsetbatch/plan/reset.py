"""Reset: move a pipeline's frontier, validated, audited, and without ever duplicating a record.

* Forward: the skipped offsets ``[frontier, target)`` are recorded as gap rows (reason ``reset``),
  so the ledger still accounts for every offset.
* Backward over committed batches needs ``allow_rewind``. The rewound batches become
  ``superseded``; the target snaps back to batch boundaries (a batch is re-read whole, on all its
  partitions) so that when the next runs re-read those offsets the new batch's output replaces the
  superseded one's: never duplicated, never partially lost.
* A planned but uncommitted incremental batch is ``abandoned`` (its compare-and-set could not
  succeed any more).
* Skipping records is data loss on purpose, so applying a reset that skips more than
  ``MAX_RESET_SKIP`` (10,000) records, summed over partitions, or any record at all with a
  timestamp target after the newest record of every partition (a mistyped year skips everything
  unread), needs ``allow_data_loss`` (CLI: ``--allow-data-loss``). A dry run is never refused for
  it; it logs that applying would be.

``plan_reset`` validates everything against Kafka and the ledger and changes nothing (the dry
run); ``apply_reset`` writes the plan in the caller's locked transaction with one audit event.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field

import sqlalchemy as sa

from offsetbatch.errors import RunRequestError
from offsetbatch.ledger import Ledger, summaries
from offsetbatch.ledger.errors import SummarizedBatchError
from offsetbatch.pipeline import Pipeline
from offsetbatch.model import Gap, TopicPartition
from offsetbatch.plan.request import MAX_RESET_SKIP, ResetTarget, RunRequest, check_reason
from offsetbatch.source.admin import KafkaAdmin
from offsetbatch.source.progress import publish_progress

log = logging.getLogger(__name__)


@dataclass
class Move:
    topic: str
    partition: int
    frontier: int | None  # None: a partition the ledger does not track yet
    to: int
    requested: int
    log_start: int
    log_end: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def direction(self) -> str:
        if self.frontier is None:
            return "start"
        return "forward" if self.to > self.frontier else "back" if self.to < self.frontier else "unchanged"


@dataclass
class ResetPlan:
    pipeline: str
    target: str
    moves: list[Move] = field(default_factory=list)
    superseded: list[int] = field(default_factory=list)
    abandoned: list[int] = field(default_factory=list)

    @property
    def changes(self) -> bool:
        return any(m.direction != "unchanged" for m in self.moves)

    @property
    def skipped(self) -> int:
        """Offsets this reset records as gap rows: records nobody will read."""
        return sum(m.to - m.frontier for m in self.moves if m.direction == "forward")

    @property
    def past_newest(self) -> bool:
        """Every partition's requested position is its log end (a timestamp after the newest record)."""
        return bool(self.moves) and all(m.requested >= m.log_end for m in self.moves)

    def to_dict(self) -> dict:
        return {"pipeline": self.pipeline, "target": self.target, "superseded": self.superseded,
                "abandoned": self.abandoned,
                "moves": [{**asdict(m), "direction": m.direction} for m in self.moves]}

    def describe(self) -> str:
        moved = [f"{m.tp} {m.frontier}->{m.to}" + (f" (asked {m.requested})" if m.requested != m.to else "")
                 for m in self.moves if m.direction != "unchanged"]
        extra = (f"; supersedes batch(es) {', '.join(map(str, self.superseded))}" if self.superseded else "") + (
            f"; abandons planned batch(es) {', '.join(map(str, self.abandoned))}" if self.abandoned else "")
        return f"pipeline {self.pipeline}: reset to {self.target}: " + (", ".join(moved) or "nothing moves") + extra


def _requested(name: str, kafka: KafkaAdmin, target: ResetTarget,
                present: set[TopicPartition], logs) -> dict[TopicPartition, int]:
    if target.kind == "earliest":
        return {tp: logs[tp].earliest for tp in present}
    if target.kind == "latest":
        return {tp: logs[tp].latest for tp in present}
    if target.kind == "timestamp":
        return kafka.offsets_for_time(present, int(target.timestamp.timestamp() * 1000))
    topics = sorted({tp.topic for tp in present})
    for tp, offset in sorted(target.offsets.items()):
        if tp.topic not in topics:
            raise RunRequestError(f"pipeline {name}: reset_to names topic {tp.topic!r}, which this pipeline does not "
                               f"read (it reads {', '.join(topics)}). Nothing was changed.")
        if tp not in present:
            have = sorted(p.partition for p in present if p.topic == tp.topic)
            raise RunRequestError(f"pipeline {name}: reset_to names partition {tp}, which does not exist (topic "
                               f"{tp.topic} has partitions {have[0]}..{have[-1]}). Nothing was changed.")
        lo, hi = logs[tp].earliest, logs[tp].latest
        if not lo <= offset <= hi:
            raise RunRequestError(f"pipeline {name}: reset_to offset {offset} of {tp} is outside the log "
                               f"[earliest {lo}, end {hi}]. Nothing was changed.")
    return dict(target.offsets)


def _refuse_summarized(ledger: Ledger, conn: sa.Connection, name: str, target: ResetTarget, wanted: dict,
                       positions: dict, bounds: dict) -> None:
    """A rewind into offsets ledger maintenance summarized is refused while planning (a dry run says
    so too, naming what was asked): those batches' ranges are gone, so their output could not be
    superseded and would be read twice. ``Ledger.move_frontier`` refuses it again when applied."""
    spans = summaries.history_spans(conn, name)
    for tp, to in sorted(positions.items()):
        span = spans.get(tp)
        if span is None or tp not in bounds or to >= bounds[tp][1] or to >= span.until_offset:
            continue
        asked = wanted.get(tp, to)
        snapped = f" (asked {asked}; a rewind starts over at the start of each batch it reaches)" if asked != to else ""
        raise SummarizedBatchError(
            f"pipeline {name}: resetting to {target.describe()} rewinds {tp} to offset {to}{snapped}, into history "
            f"summarized by ledger maintenance (offsets [{span.from_offset}, {span.until_offset}) of batches "
            f"{span.first_batch_id} to {span.last_batch_id}); their ranges are gone, so their output could not be "
            f"superseded and would be read twice. Nothing was changed. Rewind {tp} to offset {span.until_offset} "
            f"or later.")


def plan_reset(pipeline: Pipeline, ledger: Ledger, conn: sa.Connection, kafka: KafkaAdmin,
               target: ResetTarget, allow_rewind: bool) -> ResetPlan:
    """Validate ``target`` and work out every change; raises ``RunRequestError`` naming the bad value."""
    cfg = pipeline.cfg
    name = cfg.name
    present = kafka.partitions(cfg.kafka.topics, cfg.kafka.pattern)
    if not present:
        raise RunRequestError(f"pipeline {name}: none of its topics exist on {kafka.bootstrap}. Nothing was changed.")
    bounds = ledger.frontier_full(conn, name)
    logs = kafka.offsets(present)
    wanted = _requested(name, kafka, target, present, logs)

    # Rewinding: every committed range ending after the new position is superseded, and the position
    # snaps back to the start of each superseded batch on each of its partitions (to a fixpoint).
    positions = dict(wanted)
    committed: dict[int, list] = {}
    for batch_id, status, r in ledger.ranges_in_use(conn, name):
        if status == "committed":
            committed.setdefault(batch_id, []).append(r)
        elif r.frontier_before is None and r.tp in positions and r.until_offset > positions[r.tp]:
            raise RunRequestError(f"pipeline {name}: backfill batch {batch_id} (planned, not committed) reads {r}; "
                               f"finish or fail its run before resetting over it. Nothing was changed.")
    superseded: set[int] = set()
    changed = True
    while changed:
        changed = False
        for batch_id, rs in committed.items():
            if batch_id in superseded:
                continue
            if any(r.tp in positions and r.until_offset > positions[r.tp] for r in rs):
                superseded.add(batch_id)
                changed = True
                for r in rs:
                    now = positions.get(r.tp, bounds.get(r.tp, (0, r.from_offset))[1])
                    positions[r.tp] = min(now, r.from_offset)
    _refuse_summarized(ledger, conn, name, target, wanted, positions, bounds)
    if superseded and not allow_rewind:
        rewound = [f"{tp} {bounds[tp][1]}->{o}" for tp, o in sorted(wanted.items()) if tp in bounds and o < bounds[tp][1]]
        raise RunRequestError(
            f"pipeline {name}: resetting to {target.describe()} moves the frontier back ({', '.join(rewound)}) over "
            f"committed batch(es) {', '.join(map(str, sorted(superseded)))}. Set allow_rewind (CLI: --allow-rewind) "
            f"to supersede them: their output is replaced when the offsets are read again. Nothing was changed."
        )
    if superseded:
        pipeline.sink.check_reread(sorted(superseded), "a rewind")
    plan = ResetPlan(name, target.describe(), superseded=sorted(superseded))
    for tp, to in sorted(positions.items()):
        frontier = bounds[tp][1] if tp in bounds else None
        plan.moves.append(Move(tp.topic, tp.partition, frontier, to, wanted.get(tp, to),
                               logs[tp].earliest if tp in logs else 0, logs[tp].latest if tp in logs else 0))
    pending = ledger.pending(conn, name)
    if pending is not None and plan.changes:
        plan.abandoned.append(pending.batch_id)
    return plan


def data_loss_refusal(plan: ResetPlan, target: ResetTarget) -> str | None:
    """Why applying ``plan`` needs ``allow_data_loss``, or ``None``. Checked on the plan, not the
    request, because only Kafka's offsets tell how many records a target skips."""
    skipped = plan.skipped
    if not skipped:
        return None
    skips = _skips(plan)
    if target.kind == "timestamp" and plan.past_newest:
        return (f"pipeline {plan.pipeline}: reset_to {target.timestamp.isoformat()} is after the newest record of "
                f"every partition, so it would skip all {skipped:,} unread records ({skips}) and record them as "
                f"gaps. Check the timestamp (its year?); to skip them on purpose use reset_to latest or set "
                f"allow_data_loss (CLI: --allow-data-loss). Nothing was changed.")
    if skipped > MAX_RESET_SKIP:
        return (f"pipeline {plan.pipeline}: resetting to {target.describe()} would skip {skipped:,} unread records "
                f"({skips}), more than the {MAX_RESET_SKIP:,} a reset may skip without allow_data_loss. Run it as a "
                f"dry run to check the moves, then set allow_data_loss (CLI: --allow-data-loss) to skip them on "
                f"purpose. Nothing was changed.")
    return None


def _skips(plan: ResetPlan, shown: int = 5) -> str:
    """The skipped ranges for a message: the first few, so a 1,000-partition topic stays readable."""
    forward = [f"{m.tp} [{m.frontier}, {m.to})" for m in plan.moves if m.direction == "forward"]
    more = f" and {len(forward) - shown} more partition(s)" if len(forward) > shown else ""
    return ", ".join(forward[:shown]) + more


def check_data_loss(plan: ResetPlan, target: ResetTarget, allow_data_loss: bool) -> None:
    """Refuse to apply a reset that skips too many records unless the caller allowed data loss."""
    refusal = data_loss_refusal(plan, target)
    if refusal and not allow_data_loss:
        raise RunRequestError(refusal)
    if refusal:
        log.warning("pipeline %s: allow_data_loss set: skipping %d unread records", plan.pipeline, plan.skipped)


def apply_reset(ledger: Ledger, conn: sa.Connection, plan: ResetPlan, actor: str | None, reason: str | None) -> None:
    """Write ``plan`` in ``conn``'s (locked) transaction, with one audited ``frontier_reset`` event."""
    name = plan.pipeline
    ledger.set_status(conn, name, plan.abandoned, "abandoned", from_status="planned")
    ledger.set_status(conn, name, plan.superseded, "superseded", from_status="committed")
    bounds = ledger.frontier_full(conn, name)
    for m in plan.moves:
        if m.direction == "start":
            ledger.start_partitions(conn, name, {m.tp: m.to}, f"reset to {plan.target}")
        elif m.direction == "forward":
            ledger.record_gap(conn, name, Gap(m.topic, m.partition, m.frontier, m.to, reason="reset"))
            ledger.move_frontier(conn, name, m.tp, m.frontier, m.to)
        elif m.direction == "back":
            ledger.drop_gaps_from(conn, name, m.tp, m.to)
            first = bounds[m.tp][0]
            ledger.move_frontier(conn, name, m.tp, m.frontier, m.to, start_offset=m.to if m.to < first else None)
    ledger.event(conn, name, "frontier_reset", {**plan.to_dict(), "reason": reason}, actor=actor)
    log.warning("%s (applied by %s: %s)", plan.describe(), actor or "unknown", reason or "no reason given")


def run_reset(pipeline: Pipeline, ledger: Ledger, kafka: KafkaAdmin, request: RunRequest) -> ResetPlan:
    """A reset request end to end: a dry run reads only; otherwise plan and apply under the
    pipeline lock, then publish the new frontier to the consumer group."""
    cfg = pipeline.cfg
    check_reason(cfg.name, request.reason)
    if request.dry_run:
        with ledger.reading() as conn:
            plan = plan_reset(pipeline, ledger, conn, kafka, request.reset_to, request.allow_rewind)
        log.info("DRY RUN (nothing changed; set dry_run false / --apply to apply): %s", plan.describe())
        if (refusal := data_loss_refusal(plan, request.reset_to)) and not request.allow_data_loss:
            log.warning("DRY RUN: applying this reset would be refused: %s", refusal)
        return plan
    with ledger.lock(cfg.name) as conn:
        plan = plan_reset(pipeline, ledger, conn, kafka, request.reset_to, request.allow_rewind)
        check_data_loss(plan, request.reset_to, request.allow_data_loss)
        apply_reset(ledger, conn, plan, request.actor, request.reason)
    publish_progress(cfg.name, cfg.group_id, ledger, kafka)
    return plan
