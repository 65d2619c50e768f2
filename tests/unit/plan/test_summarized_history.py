"""Replays and resets meet history ledger maintenance summarized (``ledger.history``) on a
real SQLite ledger with a stand-in for Kafka's offset lookups: a replay by id or by window that
reaches summarized batches, and a rewind into them, are refused with nothing changed; a rewind
that stays after the summary works as before."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from offsetbatch.ledger import Ledger, queries
from offsetbatch.ledger import history as ledger_history
from offsetbatch.ledger.store import SummarizedBatchError
from offsetbatch.maintenance import ledger_actions
from offsetbatch.model import OffsetRange, TopicPartition
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan.planner import RunInfo, refuse_a_summarized_run
from offsetbatch.plan.replay import plan_window, replay_targets
from offsetbatch.plan.request import ResetTarget
from offsetbatch.plan.reset import apply_reset, plan_reset
from offsetbatch.sinks.maintenance import Horizon
from offsetbatch.source.admin import PartitionOffsets

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)
CFG = SimpleNamespace(name="p", kafka=SimpleNamespace(topics=["t"], pattern=None), group_id="offsetbatch.p",
                      sink={"path": "/tables/p"}, on_data_loss="fail",
                      caps=SimpleNamespace(max_records_per_partition=1000, max_records_per_batch=1000))


class FakeKafka:
    bootstrap = "fake:9092"

    def __init__(self, low: dict | None = None, cut: dict | None = None):
        """``low``/``cut``: per partition, the offsets a window's start and end find."""
        self.low, self.cut = low or {}, cut or {}

    def partitions(self, topics=None, pattern=None):
        return {P0, P1}

    def offsets(self, tps, cut_timestamp_ms=None):
        return {tp: PartitionOffsets(0, 1000, cut=self.cut.get(tp, 1000)) for tp in tps}

    def offsets_for_time(self, tps, ms):
        return {tp: self.low.get(tp, 0) for tp in tps}


@pytest.fixture
def ledger(tmp_path):
    """Batches 1: t/0 [0,100) t/1 [0,50); 2: t/0 [100,200); 3: t/1 [50,80); 4: t/0 [200,300) t/1 [80,90),
    all published; 1..3 summarized (4 is named by both frontiers)."""
    led = Ledger(f"sqlite:///{tmp_path}/ledger.db", create=True)
    with led.lock("p") as conn:
        led.start_partitions(conn, "p", {P0: 0, P1: 0}, "earliest")
    for planned in ([OffsetRange("t", 0, 0, 100, 0), OffsetRange("t", 1, 0, 50, 0)],
                    [OffsetRange("t", 0, 100, 200, 100)], [OffsetRange("t", 1, 50, 80, 50)],
                    [OffsetRange("t", 0, 200, 300, 200), OffsetRange("t", 1, 80, 90, 80)]):
        with led.lock("p") as conn:
            b = led.insert_batch(conn, "p", "incremental", planned, dag_id="d", run_id=None, interval=(None, None),
                                 output_path="/tmp/x")
            led.commit_batch(conn, b, {}, {})
            led.mark_published(conn, "p", b.batch_id)
    now = datetime.now(timezone.utc)
    for action in ledger_actions.actions(led, "p", Horizon(now, now, now, now)):
        action.apply()
    yield led
    led.dispose()


def test_the_fixture_keeps_only_the_batch_the_frontiers_name(ledger):
    assert [b.batch_id for b in ledger.list_batches("p")] == [4]
    summarized = queries.history_summary(ledger, "p")
    assert [(p["partition"], p["from_offset"], p["until_offset"]) for p in summarized["partitions"]] == \
        [(0, 0, 200), (1, 0, 80)]


def test_an_old_run_cleared_after_its_batch_was_summarized_is_refused_and_a_new_run_is_not(ledger):
    """Clearing a run re-runs its recorded batch; once that batch is summarized there is nothing to
    repeat, and planning the next batch under the old run's id would give today's records its interval."""
    done = queries.history_summary(ledger, "p")
    last = datetime.fromisoformat(done["last_committed_at"])
    old = RunInfo("d", "scheduled__old", last - timedelta(hours=2), last - timedelta(hours=1))
    with ledger.lock("p") as conn, pytest.raises(SummarizedBatchError, match=r"run scheduled__old \(interval ending "
                                                                             r".*\) has no batch .* Nothing was planned"):
        refuse_a_summarized_run(ledger, conn, "p", old)
    new = RunInfo("d", "scheduled__new", last, last + timedelta(hours=1))
    with ledger.lock("p") as conn:
        refuse_a_summarized_run(ledger, conn, "p", new)  # no error: an interval after the summary
        refuse_a_summarized_run(ledger, conn, "p", RunInfo("d", "manual__x"))  # no interval: nothing to compare


def test_a_replay_of_a_summarized_batch_is_refused_naming_it(ledger):
    with ledger.reading() as conn, pytest.raises(SummarizedBatchError, match=r"pipeline p: batch\(es\) 2 were "
                                                                           r"summarized .*Nothing was changed"):
        replay_targets(Pipeline(CFG), ledger, conn, (2, 4))
    with ledger.reading() as conn:
        assert [b.batch_id for b in replay_targets(Pipeline(CFG), ledger, conn, (4,))] == [4]


def test_a_replay_window_reaching_summarized_offsets_is_refused(ledger):
    window = (datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 1, 2, tzinfo=timezone.utc))
    with ledger.reading() as conn, pytest.raises(SummarizedBatchError, match="were summarized"):
        plan_window(Pipeline(CFG), ledger, conn, FakeKafka({P0: 150, P1: 90}, {P0: 250, P1: 90}), window)
    with ledger.reading() as conn:  # a window of kept batches only
        targets, new = plan_window(Pipeline(CFG), ledger, conn, FakeKafka({P0: 250, P1: 90}, {P0: 260, P1: 90}),
                                   window)
    assert [b.batch_id for b in targets] == [4] and new == []


def test_a_rewind_into_summarized_history_is_refused_and_one_after_it_works(ledger):
    with pytest.raises(SummarizedBatchError, match=r"rewinds t/0 to offset 0 \(asked 150; .*\), into history "
                                                   r"summarized .* Rewind t/0 to offset 200 or later"):
        with ledger.lock("p") as conn:  # refused while planning: a dry run (plan only) says so too
            plan_reset(Pipeline(CFG), ledger, conn, FakeKafka(), ResetTarget("offsets", offsets={P0: 150}),
                       allow_rewind=True)
    assert ledger.frontier_now("p") == {P0: 300, P1: 90} and ledger.get_batch("p", 4).status == "committed"
    with ledger.lock("p") as conn:
        plan = plan_reset(Pipeline(CFG), ledger, conn, FakeKafka(), ResetTarget("offsets", offsets={P0: 250}),
                          allow_rewind=True)
        apply_reset(ledger, conn, plan, actor="tester", reason="unit")
    assert plan.superseded == [4] and ledger.frontier_now("p") == {P0: 200, P1: 80}
