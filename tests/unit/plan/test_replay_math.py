"""The arithmetic of backfill planning: free spans around existing ranges, and packing them into
batches within the caps."""

from __future__ import annotations

from offsetbatch.config import Caps
from offsetbatch.model import TopicPartition
from offsetbatch.model import subtract
from offsetbatch.plan.replay import pack

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


def test_subtract_leaves_only_uncovered_offsets():
    assert subtract((0, 100), []) == [(0, 100)]
    assert subtract((0, 100), [(20, 30), (50, 60)]) == [(0, 20), (30, 50), (60, 100)]
    assert subtract((0, 100), [(0, 100)]) == []
    assert subtract((10, 20), [(0, 15), (18, 40)]) == [(15, 18)]
    assert subtract((10, 20), [(30, 40)]) == [(10, 20)]


def test_pack_respects_both_caps_and_covers_every_offset_once():
    caps = Caps(max_records_per_partition=40, max_records_per_batch=60)
    batches = pack({A: [(0, 100)], B: [(0, 30), (50, 70)]}, caps)
    covered = {}
    for batch in batches:
        assert sum(r.size for r in batch) <= 60
        assert len({r.tp for r in batch}) == len(batch)  # at most one range per partition
        for r in batch:
            assert r.size <= 40 and r.frontier_before is None
            covered.setdefault(r.tp, []).extend(range(r.from_offset, r.until_offset))
    assert sorted(covered[A]) == list(range(100))
    assert sorted(covered[B]) == list(range(30)) + list(range(50, 70))
