"""Reset planning on a real SQLite ledger with a stand-in for Kafka's offset lookups (logic only;
the integration tests run resets against the real broker): a rewind snaps to batch boundaries on
every partition of every superseded batch, and needs the explicit flag."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from offsetbatch.errors import RunRequestError
from offsetbatch.kafka_source import PartitionOffsets
from offsetbatch.ledger import Ledger
from offsetbatch.model import OffsetRange, TopicPartition
from offsetbatch.run_request import ResetTarget
from offsetbatch.reset import apply_reset, plan_reset

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)


class FakeKafka:
    bootstrap = "fake:9092"

    def partitions(self, topics=None, pattern=None):
        return {P0, P1}

    def offsets(self, tps, cut_timestamp_ms=None):
        return {tp: PartitionOffsets(0, 1000) for tp in tps}

    def offsets_for_time(self, tps, ms):
        return {tp: 0 for tp in tps}


@pytest.fixture
def ledger(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path}/ledger.db")
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


CFG = SimpleNamespace(name="p", kafka=SimpleNamespace(topics=["t"], pattern=None))


def test_rewind_snaps_back_to_whole_batches_on_all_their_partitions(ledger):
    with ledger.reading() as conn:
        plan = plan_reset(CFG, ledger, conn, FakeKafka(), ResetTarget("offsets", offsets={P0: 150}), allow_rewind=True)
    # t/0@150 is inside batch 2 -> back to 100; batch 1 is untouched (ends at 100).
    assert plan.superseded == [2] and {m.tp: m.to for m in plan.moves} == {P0: 100}

    with ledger.reading() as conn:
        plan = plan_reset(CFG, ledger, conn, FakeKafka(), ResetTarget("offsets", offsets={P1: 60}), allow_rewind=True)
    assert plan.superseded == [3] and {m.tp: m.to for m in plan.moves} == {P1: 50}

    with ledger.reading() as conn:
        plan = plan_reset(CFG, ledger, conn, FakeKafka(), ResetTarget("offsets", offsets={P1: 10}), allow_rewind=True)
    # inside batch 1 on t/1: batch 1 is re-read whole, so t/0 goes back to 0 too, superseding batch 2.
    assert plan.superseded == [1, 2, 3] and {m.tp: m.to for m in plan.moves} == {P0: 0, P1: 0}
    assert [m.requested for m in plan.moves] == [0, 10]


def test_rewind_without_the_flag_is_refused_and_apply_is_audited(ledger):
    target = ResetTarget("offsets", offsets={P0: 150})
    with ledger.reading() as conn, pytest.raises(RunRequestError, match=r"committed batch\(es\) 2\. Set allow_rewind"):
        plan_reset(CFG, ledger, conn, FakeKafka(), target, allow_rewind=False)
    with ledger.lock("p") as conn:
        plan = plan_reset(CFG, ledger, conn, FakeKafka(), target, allow_rewind=True)
        apply_reset(ledger, conn, plan, actor="tester", reason="unit")
    assert ledger.frontier_now("p") == {P0: 100, P1: 80}
    assert ledger.get_batch("p", 2).status == "superseded"
    [event] = [e for e in ledger.list_events("p") if e["kind"] == "frontier_reset"]
    assert event["actor"] == "tester" and event["detail"]["superseded"] == [2]


def test_forward_reset_records_a_gap(ledger):
    with ledger.lock("p") as conn:
        plan = plan_reset(CFG, ledger, conn, FakeKafka(), ResetTarget("latest"), allow_rewind=False)
        apply_reset(ledger, conn, plan, actor="tester", reason=None)
    assert ledger.frontier_now("p") == {P0: 1000, P1: 1000}
    assert sorted((g.partition, g.from_offset, g.until_offset, g.reason) for _, g in ledger.list_gaps("p")) == \
        [(0, 200, 1000, "reset"), (1, 80, 1000, "reset")]
