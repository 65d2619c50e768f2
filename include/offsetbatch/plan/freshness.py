"""When records wait long enough or in number enough to start a run (``airflow.trigger``).

The lag trigger (``dag.lag_trigger``) asks this module once per poll: how many records wait past
the ledger's frontier (``waiting``: the broker's log ends, one batched metadata request, against
the ledger's frontier rows; no consumer, no group offsets), and, only when the age rule could
decide, how long the oldest of them has waited (``oldest_age``: one record fetched per partition,
once per frontier position). ``LagWatch`` turns those readings into at most one firing per
crossing: after it fires it stays quiet until the frontier moves (the run it started committed),
so duplicate or late readings never start a storm of runs. What a run reads stays the plan task's
decision; the watch only says when one is worth starting.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from offsetbatch.model import TopicPartition

if TYPE_CHECKING:
    from offsetbatch.config import LagTriggerSettings
    from offsetbatch.ledger import Ledger
    from offsetbatch.pipeline import Pipeline
    from offsetbatch.source.admin import KafkaAdmin, PartitionOffsets

# A firing whose run never moved the frontier (the run failed, the DAG was paused, the event was
# lost with a triggerer) is repeated after this long, or twice the rule's max_delay if longer.
REARM_AFTER_S = 900.0


def describe_rule(rule: "LagTriggerSettings") -> str:
    """The rule in one line, for ``doctor``, ``status`` and the DAG's documentation."""
    bounds = []
    if rule.min_records is not None:
        bounds.append(f"{rule.min_records:,} records wait")
    if rule.max_delay is not None:
        bounds.append(f"the oldest waiting record has waited {_seconds(rule.max_delay)}")
    return f"a run starts when {' or '.join(bounds)} (polled every {_seconds(rule.poll)})"


def _seconds(value: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if value >= size and value % size == 0:
            return f"{int(value // size)}{unit}"
    return f"{value:g}s"


@dataclass(frozen=True)
class Waiting:
    """Records past the frontier, per partition (``starts``: the first waiting offset)."""

    records: int
    starts: dict[TopicPartition, int]
    # where each partition's next read starts (the frontier, or the starting policy's offset before
    # the ledger tracks it), to tell whether a run moved it; a first run that only records the
    # starting offsets does not
    frontier: tuple
    # the topics the reading found partitions of (a named topic not among them does not exist)
    present: frozenset[str] = frozenset()

    @property
    def partitions(self) -> int:
        return len(self.starts)


def missing_sources(pipeline: "Pipeline", present: Iterable[str]) -> list[str]:
    """What the pipeline reads that the cluster does not have: each named topic absent from
    ``present``, or its pattern when the pattern matches no topic. Nothing waits there, so neither a
    lag trigger nor a run has anything to read until it exists (``offsetbatch status`` and the
    triggerer's log say so)."""
    source, present = pipeline.cfg.kafka, set(present)
    if source.pattern:
        return [] if present else [f"pattern {source.pattern}"]
    return sorted(set(source.topics or ()) - present)


def waiting(pipeline: "Pipeline", ledger: "Ledger | None", kafka: "KafkaAdmin") -> Waiting:
    """How many records wait past the frontier. A partition the ledger does not track yet waits
    from where the pipeline's first run would start (``starting_policy``: its earliest record, or
    none for 'latest'; a timestamp policy counts from the earliest, which can only start a run
    sooner). ``ledger`` is None while the pipeline has none (before its first run)."""
    rows = frontier(pipeline, ledger)
    source = pipeline.cfg.kafka
    tps = set(kafka.partitions(source.topics, source.pattern)) | set(rows)
    return waiting_at(pipeline, rows, kafka.offsets(sorted(tps)) if tps else {})


def frontier(pipeline: "Pipeline", ledger: "Ledger | None") -> dict[TopicPartition, int]:
    """The ledger's next offset per tracked partition (none before the pipeline's first run)."""
    return {TopicPartition(r["topic"], r["partition"]): r["next_offset"]
            for r in (ledger.frontier_rows(pipeline.name) if ledger is not None else [])}


def waiting_at(pipeline: "Pipeline", rows: dict[TopicPartition, int],
               offsets: "dict[TopicPartition, PartitionOffsets]") -> Waiting:
    """``waiting`` from the frontier ``rows`` and the partitions' offsets, read elsewhere (by this
    pipeline's own poll, or by the poll it shares with the other pipelines on its cluster)."""
    positions: dict[TopicPartition, int] = {}
    for tp, po in offsets.items():
        if tp in rows:
            positions[tp] = max(rows[tp], po.earliest)
        else:
            positions[tp] = po.latest if pipeline.cfg.starting_policy == "latest" else po.earliest
    starts = {tp: at for tp, at in positions.items() if offsets[tp].latest > at}
    total = sum(offsets[tp].latest - at for tp, at in starts.items())
    return Waiting(total, starts, tuple(sorted((tp.topic, tp.partition, at) for tp, at in positions.items())),
                   frozenset(tp.topic for tp in offsets))


@dataclass(frozen=True)
class Interest:
    """The topics a pipeline reads (named, or by pattern) and the ones its ledger tracks: what a
    poll shared by several pipelines must cover for this one."""

    topics: frozenset[str]
    patterns: frozenset[str]

    @classmethod
    def of(cls, pipeline: "Pipeline", rows: dict[TopicPartition, int]) -> "Interest":
        source = pipeline.cfg.kafka
        return cls(frozenset(source.topics or ()) | {tp.topic for tp in rows},
                   frozenset([source.pattern] if source.pattern else []))

    def covers(self, tp: TopicPartition) -> bool:
        return tp.topic in self.topics or (not tp.topic.startswith("__") and any(
            re.fullmatch(p, tp.topic) for p in self.patterns))

    def within(self, other: "Interest") -> bool:
        return self.topics <= other.topics and self.patterns <= other.patterns

    @staticmethod
    def union(interests: "Iterable[Interest]") -> "Interest":
        interests = list(interests)
        return Interest(frozenset().union(*(i.topics for i in interests)),
                        frozenset().union(*(i.patterns for i in interests)))


def oldest_age(kafka: "KafkaAdmin", starts: dict[TopicPartition, int], now_ms: float,
               known: dict[tuple[TopicPartition, int], int]) -> float | None:
    """Seconds the oldest waiting record has waited: the smallest timestamp among the first waiting
    record of each partition. ``known`` caches those timestamps by (partition, offset), so a poll
    fetches only partitions whose first waiting offset moved. A record stamped in the future (a
    producer's event time, a skewed clock) counts from when it was first read. None when no
    timestamp could be read."""
    missing = {tp: o for tp, o in starts.items() if (tp, o) not in known}
    if missing:
        for tp, stamp in kafka.timestamps_at(missing).items():
            known[(tp, missing[tp])] = min(stamp, now_ms)
    stamps = [known[(tp, o)] for tp, o in starts.items() if (tp, o) in known]
    if not stamps:
        return None
    return max(now_ms - min(stamps), 0.0) / 1000


@dataclass
class LagWatch:
    """The firing rule over successive readings (pure: the trigger feeds it)."""

    rule: "LagTriggerSettings"
    fired_frontier: tuple | None = None
    fired_at: float | None = None
    ages: dict = field(default_factory=dict)  # (partition, offset) -> timestamp ms, for ``oldest_age``

    @property
    def rearm_after(self) -> float:
        return max(REARM_AFTER_S, 2 * (self.rule.max_delay or 0))

    def armed(self, frontier: tuple, now: float) -> bool:
        """False from a firing until the frontier moves (or ``rearm_after`` passes)."""
        if self.fired_frontier is None:
            return True
        if frontier != self.fired_frontier or now - (self.fired_at or now) >= self.rearm_after:
            self.fired_frontier = self.fired_at = None
            return True
        return False

    def needs_age(self, seen: Waiting, now: float) -> bool:
        """Whether the decision needs ``oldest_age`` (a record fetch): only when records wait, the
        count alone does not decide, and the watch is armed."""
        return (self.rule.max_delay is not None and seen.records > 0 and self.armed(seen.frontier, now)
                and not (self.rule.min_records is not None and seen.records >= self.rule.min_records))

    def decide(self, seen: Waiting, age_s: float | None, now: float | None = None) -> str | None:
        """'records' or 'delay' when a run should start now (and the watch disarms), else None."""
        now = time.monotonic() if now is None else now
        if seen.records <= 0 or not self.armed(seen.frontier, now):
            return None
        reason = None
        if self.rule.min_records is not None and seen.records >= self.rule.min_records:
            reason = "records"
        elif self.rule.max_delay is not None and age_s is not None and age_s >= self.rule.max_delay:
            reason = "delay"
        if reason:
            self.fired_frontier, self.fired_at = seen.frontier, now
            live = set(seen.starts.items())
            self.ages = {k: v for k, v in self.ages.items() if k in live}  # forget offsets read past
        return reason
