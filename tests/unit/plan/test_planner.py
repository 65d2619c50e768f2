"""The planner's arithmetic: cut, caps, fair share, retention loss, vanished partitions."""

from __future__ import annotations

import pytest

from offsetbatch.config import Caps
from offsetbatch.errors import DataLossError, PartitionVanishedError
from offsetbatch.model import Gap, OffsetRange, TopicPartition
from offsetbatch.plan.planner import fair_share, plan_ranges
from offsetbatch.source.admin import PartitionOffsets

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
BIG = Caps(max_records_per_partition=10**9, max_records_per_batch=10**9)


def test_reads_from_frontier_to_the_time_cut():
    ranges, gaps = plan_ranges("p", {A: 10, B: 0}, {A: PartitionOffsets(0, 100, 40), B: PartitionOffsets(0, 50, 50)}, BIG, "fail", True)
    assert ranges == [OffsetRange("t", 0, 10, 40, 10), OffsetRange("t", 1, 0, 50, 0)] and gaps == []


def test_without_a_cut_reads_to_the_log_end():
    ranges, _ = plan_ranges("p", {A: 10}, {A: PartitionOffsets(0, 100, 40)}, BIG, "fail", False)
    assert ranges == [OffsetRange("t", 0, 10, 100, 10)]


def test_a_cut_behind_the_frontier_plans_nothing():
    ranges, _ = plan_ranges("p", {A: 70}, {A: PartitionOffsets(0, 100, 40)}, BIG, "fail", True)
    assert ranges == []


def test_per_partition_and_per_batch_caps():
    caps = Caps(max_records_per_partition=30, max_records_per_batch=50)
    ranges, _ = plan_ranges("p", {A: 0, B: 0, C: 0},
                            {A: PartitionOffsets(0, 100), B: PartitionOffsets(0, 100), C: PartitionOffsets(0, 5)}, caps, "fail", False)
    sizes = {r.partition: r.size for r in ranges}
    assert sum(sizes.values()) == 50 and max(sizes.values()) <= 30 and sizes[2] == 5


def test_fair_share_gives_small_partitions_what_they_need_and_splits_the_rest():
    assert fair_share({A: 5, B: 100, C: 100}, 55) == {A: 5, B: 25, C: 25}
    assert fair_share({A: 0, B: 10}, 100) == {A: 0, B: 10}
    assert sum(fair_share({A: 7, B: 7, C: 7}, 10).values()) == 10


def test_retention_loss_fails_by_default_naming_partition_and_range():
    with pytest.raises(DataLossError, match=r"pipeline p: offsets \[10, 25\) of t/0 were deleted by retention"):
        plan_ranges("p", {A: 10}, {A: PartitionOffsets(25, 100)}, BIG, "fail", False)


def test_retention_loss_with_skip_records_a_gap_and_reads_the_rest():
    ranges, gaps = plan_ranges("p", {A: 10}, {A: PartitionOffsets(25, 100)}, BIG, "skip", False)
    assert gaps == [Gap("t", 0, 10, 25)]
    assert ranges == [OffsetRange("t", 0, 25, 100, 25)]


def test_a_vanished_partition_is_named():
    with pytest.raises(PartitionVanishedError, match=r"t/1 \(frontier 7\)"):
        plan_ranges("p", {A: 0, B: 7}, {A: PartitionOffsets(0, 10)}, BIG, "fail", False)


def test_a_frontier_past_the_log_end_is_an_error():
    with pytest.raises(DataLossError, match="past the log end 5"):
        plan_ranges("p", {A: 9}, {A: PartitionOffsets(0, 5)}, BIG, "fail", False)
