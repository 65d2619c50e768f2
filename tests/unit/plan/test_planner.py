"""The planner's arithmetic: cut, caps, fair share, retention loss, vanished partitions."""

from __future__ import annotations

import pytest

from offsetbatch.config import Caps
from offsetbatch.errors import DataLossError, PartitionVanishedError
from offsetbatch.model import Gap, OffsetRange, TopicPartition
from offsetbatch.plan.planner import FUTURE_TOLERANCE_MS, fair_share, lift_future_cuts, plan_ranges
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


NOW = 1_800_000_000_000  # ms


def test_a_cut_pinned_at_the_frontier_by_a_future_record_is_lifted_to_the_log_end():
    """t/0's cut lands on offset 40, stamped a year ahead, where the frontier already is: every later
    cut would land there too (Kafka's time index is monotonic), so t/0 is read to its end. t/1's cut
    is on a record of now; t/2's future record is still ahead of the frontier, so its cut holds."""
    year = 365 * 86_400_000
    pinned = PartitionOffsets(0, 100, 40, NOW + year)
    ok = PartitionOffsets(0, 50, 20, NOW - 1000)
    ahead = PartitionOffsets(0, 80, 60, NOW + year)
    offsets, lifted = lift_future_cuts({A: pinned, B: ok, C: ahead}, {A: 40, B: 0, C: 10}, NOW)
    assert lifted == {A: pinned} and offsets == {A: PartitionOffsets(0, 100, 100), B: ok, C: ahead}
    ranges, _ = plan_ranges("p", {A: 40, B: 0, C: 10}, offsets, BIG, "fail", True)
    assert ranges == [OffsetRange("t", 0, 40, 100, 40), OffsetRange("t", 1, 0, 20, 0), OffsetRange("t", 2, 10, 60, 10)]


def test_past_the_future_record_the_cut_stays_lifted_while_records_wait():
    behind = PartitionOffsets(0, 120, 40, NOW + 86_400_000)  # the frontier passed the record; new records came
    caught_up = PartitionOffsets(0, 100, 40, NOW + 86_400_000)
    offsets, lifted = lift_future_cuts({A: behind, B: caught_up}, {A: 100, B: 100}, NOW)
    assert set(lifted) == {A} and offsets[A].cut == 120 and offsets[B] == caught_up


def test_within_the_brokers_tolerance_or_at_the_log_end_a_cut_holds():
    near = PartitionOffsets(0, 100, 40, NOW + FUTURE_TOLERANCE_MS)
    at_end = PartitionOffsets(0, 100, 100, None)
    offsets, lifted = lift_future_cuts({A: near, B: at_end}, {A: 40, B: 100}, NOW)
    assert lifted == {} and offsets == {A: near, B: at_end}
