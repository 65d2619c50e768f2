"""Reset planning on a real SQLite ledger with a stand-in for Kafka's offset lookups (logic only;
the integration tests run resets against the real broker): a rewind snaps to batch boundaries on
every partition of every superseded batch, and needs the explicit flag; skipping many unread
records (or all of them, by a timestamp after the newest record) needs allow_data_loss."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from offsetbatch.errors import RunRequestError
from offsetbatch.ledger import Ledger
from offsetbatch.model import OffsetRange, TopicPartition
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan.request import MAX_RESET_SKIP, ResetTarget, RunRequest
from offsetbatch.plan.reset import apply_reset, check_data_loss, plan_reset, run_reset
from offsetbatch.source.admin import PartitionOffsets

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)


class FakeKafka:
    bootstrap = "fake:9092"

    def __init__(self, end: int = 1000, at_time: dict | None = None):
        self.end, self.at_time = end, at_time

    def partitions(self, topics=None, pattern=None):
        return {P0, P1}

    def offsets(self, tps, cut_timestamp_ms=None):
        return {tp: PartitionOffsets(0, self.end) for tp in tps}

    def offsets_for_time(self, tps, ms):
        """``at_time``: the offset a timestamp finds per partition (the log end: after the newest record)."""
        return {tp: (self.at_time or {}).get(tp, 0) for tp in tps}

    def commit_group(self, group_id, frontier):
        """run_reset publishes the new frontier to the consumer group after applying."""


@pytest.fixture
def ledger(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path}/ledger.db", create=True)
    with led.lock("p") as conn:
        led.start_partitions(conn, "p", {P0: 0, P1: 0}, "earliest")
    # batch 1: t/0 [0,100) t/1 [0,50); batch 2: t/0 [100,200); batch 3: t/1 [50,80)
    for planned in ([OffsetRange("t", 0, 0, 100, 0), OffsetRange("t", 1, 0, 50, 0)],
                    [OffsetRange("t", 0, 100, 200, 100)], [OffsetRange("t", 1, 50, 80, 50)]):
        with led.lock("p") as conn:
            b = led.insert_batch(conn, "p", "incremental", planned, dag_id="d", run_id=None, interval=(None, None),
                                 output_path="/tmp/x")
            led.commit_batch(conn, b, {}, {})
    yield led
    led.dispose()


CFG = SimpleNamespace(name="p", kafka=SimpleNamespace(topics=["t"], pattern=None), group_id="offsetbatch.p",
                      sink={"path": "/tables/p"})


def test_rewind_snaps_back_to_whole_batches_on_all_their_partitions(ledger):
    with ledger.reading() as conn:
        plan = plan_reset(Pipeline(CFG), ledger, conn, FakeKafka(), ResetTarget("offsets", offsets={P0: 150}), allow_rewind=True)
    # t/0@150 is inside batch 2 -> back to 100; batch 1 is untouched (ends at 100).
    assert plan.superseded == [2] and {m.tp: m.to for m in plan.moves} == {P0: 100}

    with ledger.reading() as conn:
        plan = plan_reset(Pipeline(CFG), ledger, conn, FakeKafka(), ResetTarget("offsets", offsets={P1: 60}), allow_rewind=True)
    assert plan.superseded == [3] and {m.tp: m.to for m in plan.moves} == {P1: 50}

    with ledger.reading() as conn:
        plan = plan_reset(Pipeline(CFG), ledger, conn, FakeKafka(), ResetTarget("offsets", offsets={P1: 10}), allow_rewind=True)
    # inside batch 1 on t/1: batch 1 is re-read whole, so t/0 goes back to 0 too, superseding batch 2.
    assert plan.superseded == [1, 2, 3] and {m.tp: m.to for m in plan.moves} == {P0: 0, P1: 0}
    assert [m.requested for m in plan.moves] == [0, 10]


def test_rewind_without_the_flag_is_refused_and_apply_is_audited(ledger):
    target = ResetTarget("offsets", offsets={P0: 150})
    with ledger.reading() as conn, pytest.raises(RunRequestError, match=r"committed batch\(es\) 2\. Set allow_rewind"):
        plan_reset(Pipeline(CFG), ledger, conn, FakeKafka(), target, allow_rewind=False)
    with ledger.lock("p") as conn:
        plan = plan_reset(Pipeline(CFG), ledger, conn, FakeKafka(), target, allow_rewind=True)
        apply_reset(ledger, conn, plan, actor="tester", reason="unit")
    assert ledger.frontier_now("p") == {P0: 100, P1: 80}
    assert ledger.get_batch("p", 2).status == "superseded"
    [event] = [e for e in ledger.list_events("p") if e["kind"] == "frontier_reset"]
    assert event["actor"] == "tester" and event["detail"]["superseded"] == [2]


def test_forward_reset_records_a_gap(ledger):
    with ledger.lock("p") as conn:
        plan = plan_reset(Pipeline(CFG), ledger, conn, FakeKafka(), ResetTarget("latest"), allow_rewind=False)
        apply_reset(ledger, conn, plan, actor="tester", reason=None)
    assert ledger.frontier_now("p") == {P0: 1000, P1: 1000}
    assert sorted((g.partition, g.from_offset, g.until_offset, g.reason) for _, g in ledger.list_gaps("p")) == \
        [(0, 200, 1000, "reset"), (1, 80, 1000, "reset")]


FUTURE = ResetTarget("timestamp", timestamp=datetime(2030, 1, 1, tzinfo=timezone.utc))


def _apply(ledger, kafka, target, allow_data_loss=False, dry_run=False, reason="unit"):
    request = RunRequest("reset", reset_to=target, dry_run=dry_run, allow_data_loss=allow_data_loss,
                         reason=reason, actor="tester")
    return run_reset(Pipeline(CFG), ledger, kafka, request)


def _state(ledger):
    return ledger.frontier_now("p"), ledger.list_gaps("p"), [e["kind"] for e in ledger.list_events("p")]


def test_a_timestamp_after_the_newest_record_is_refused_without_allow_data_loss(ledger):
    """What a mistyped year does: every unread record would become a gap row."""
    kafka = FakeKafka(at_time={P0: 1000, P1: 1000})  # no record at or after 2030: the log end
    before = _state(ledger)
    with pytest.raises(RunRequestError) as err:
        _apply(ledger, kafka, FUTURE)
    assert str(err.value) == (
        "pipeline p: reset_to 2030-01-01T00:00:00+00:00 is after the newest record of every partition, so it "
        "would skip all 1,720 unread records (t/0 [200, 1000), t/1 [80, 1000)) and record them as gaps. Check "
        "the timestamp (its year?); to skip them on purpose use reset_to latest or set allow_data_loss (CLI: "
        "--allow-data-loss). Nothing was changed.")
    assert _state(ledger) == before

    dry = _apply(ledger, kafka, FUTURE, dry_run=True)  # a dry run shows the plan; it is never refused
    assert dry.skipped == 1720 and _state(ledger) == before

    _apply(ledger, kafka, FUTURE, allow_data_loss=True)
    assert ledger.frontier_now("p") == {P0: 1000, P1: 1000}
    assert sorted((g.partition, g.from_offset, g.until_offset) for _, g in ledger.list_gaps("p")) == [(0, 200, 1000), (1, 80, 1000)]


def test_a_timestamp_reset_that_finds_records_follows_the_general_limit(ledger):
    """Skipping to the first record at a time on some partition is an ordinary forward reset."""
    plan = _apply(ledger, FakeKafka(at_time={P0: 250, P1: 1000}), FUTURE)
    assert plan.skipped == 50 + 920 and ledger.frontier_now("p") == {P0: 250, P1: 1000}


def test_skipping_more_than_the_limit_needs_allow_data_loss(ledger):
    end = MAX_RESET_SKIP // 2 + 141  # t/0 skips end-200, t/1 end-80: 2 over the limit together
    kafka = FakeKafka(end=end)
    before = _state(ledger)
    with pytest.raises(RunRequestError) as err:
        _apply(ledger, kafka, ResetTarget("latest"))
    skipped = 2 * end - 280
    assert skipped == MAX_RESET_SKIP + 2
    assert str(err.value) == (
        f"pipeline p: resetting to latest would skip {skipped:,} unread records (t/0 [200, {end}), t/1 [80, {end})), "
        f"more than the {MAX_RESET_SKIP:,} a reset may skip without allow_data_loss. Run it as a dry run to check "
        f"the moves, then set allow_data_loss (CLI: --allow-data-loss) to skip them on purpose. Nothing was changed.")
    assert _state(ledger) == before
    _apply(ledger, kafka, ResetTarget("latest"), allow_data_loss=True)
    assert ledger.frontier_now("p") == {P0: end, P1: end}


def test_skips_within_the_limit_and_rewinds_need_no_flag(ledger):
    with ledger.reading() as conn:
        small = plan_reset(Pipeline(CFG), ledger, conn, FakeKafka(end=1000), ResetTarget("latest"), allow_rewind=False)
        back = plan_reset(Pipeline(CFG), ledger, conn, FakeKafka(), ResetTarget("offsets", offsets={P0: 150}), allow_rewind=True)
    check_data_loss(small, ResetTarget("latest"), allow_data_loss=False)
    assert back.skipped == 0
    check_data_loss(back, ResetTarget("offsets", offsets={P0: 150}), allow_data_loss=False)


def test_run_reset_refuses_a_reason_over_the_limit(ledger):
    """The CLI builds its request without from_params: run_reset checks the reason itself."""
    with pytest.raises(RunRequestError, match=r"^pipeline p: reason is 1,001 characters long"):
        _apply(ledger, FakeKafka(), ResetTarget("latest"), reason="z" * 1001)


def test_a_rewind_over_a_kafka_topic_sink_is_refused_unless_republish(ledger):
    kafka_sink = {"type": "kafka", "path": "/tables/p", "topic": "clean"}
    cfg = SimpleNamespace(**{**vars(CFG), "sink": kafka_sink})
    with ledger.reading() as conn, pytest.raises(RunRequestError, match=r"a rewind would re-read batch\(es\) 2, and a "
                                                                        r"Kafka topic is append-only"):
        plan_reset(Pipeline(cfg), ledger, conn, FakeKafka(), ResetTarget("offsets", offsets={P0: 150}), allow_rewind=True)
    cfg = SimpleNamespace(**{**vars(CFG), "sink": {**kafka_sink, "republish": True}})
    with ledger.reading() as conn:
        assert plan_reset(Pipeline(cfg), ledger, conn, FakeKafka(), ResetTarget("offsets", offsets={P0: 150}),
                          allow_rewind=True).superseded == [2]
