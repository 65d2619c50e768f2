"""Value types shared by the planner, the ledger, the job spec and the commit."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

BatchKind = Literal["incremental", "backfill", "replay"]
BatchStatus = Literal["planned", "committed", "abandoned", "superseded"]


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}"


@dataclass(frozen=True)
class OffsetRange:
    """``[from_offset, until_offset)`` of one partition; ``frontier_before`` is the frontier the
    commit must still find (compare-and-set), ``None`` for ranges that do not move it."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    frontier_before: int | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}[{self.from_offset},{self.until_offset})"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Gap:
    """Offsets lost to retention before they were read (recorded only with ``on_data_loss: skip``)."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    reason: str = "retention"


@dataclass
class Batch:
    pipeline: str
    batch_id: int
    kind: BatchKind
    status: BatchStatus
    ranges: list[OffsetRange] = field(default_factory=list)
    run_id: str | None = None
    dag_id: str | None = None
    stats: dict = field(default_factory=dict)
    target_batch_id: int | None = None  # replays: the batch re-read and whose output is replaced
    superseded_by: int | None = None

    @property
    def output_id(self) -> int:
        """The ``batch_id=N`` folder this batch's output is published to."""
        return self.target_batch_id or self.batch_id

    @property
    def moves_frontier(self) -> bool:
        return any(r.frontier_before is not None for r in self.ranges)

    @property
    def records(self) -> int:
        return sum(r.size for r in self.ranges)

    def describe_ranges(self, limit: int = 8) -> str:
        parts = [str(r) for r in self.ranges[:limit]]
        if len(self.ranges) > limit:
            parts.append(f"… {len(self.ranges) - limit} more")
        return ", ".join(parts) or "(no ranges)"


def subtract(span: tuple[int, int], used: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of the offsets ``[a, b)`` none of ``used`` covers (a replay window's unread
    offsets; the offsets a ledger summary holds besides the kept ranges)."""
    a, b = span
    free = []
    for u0, u1 in sorted(used):
        if u1 <= a or u0 >= b:
            continue
        if u0 > a:
            free.append((a, u0))
        a = max(a, u1)
    if a < b:
        free.append((a, b))
    return free
