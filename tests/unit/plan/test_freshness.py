"""The lag trigger's rule (``plan.freshness``, ``airflow.trigger``): the config it loads from, what
counts as waiting, and when it fires. The broker side is an in-memory stand-in for the two admin
calls the trigger makes; the real triggerer, broker and scheduler are in
tests/integration/runs/test_lag_trigger.py."""

from __future__ import annotations

import pytest
import yaml

from offsetbatch.config import ConfigError, LagTriggerSettings, load_config
from offsetbatch.model import TopicPartition
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan.freshness import (REARM_AFTER_S, LagWatch, Waiting, describe_rule, missing_sources, oldest_age,
                                        waiting)
from offsetbatch.source.admin import PartitionOffsets

A, B = TopicPartition("orders", 0), TopicPartition("orders", 1)


def _load(tmp_path, airflow: dict, **extra):
    doc = {"name": "orders", "kafka": {"topics": ["orders"]}, "sink": {"path": str(tmp_path / "t")},
           "airflow": airflow, **extra}
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_config(path)


def test_the_rule_loads_with_units_and_the_cron_may_go(tmp_path):
    cfg = _load(tmp_path, {"schedule": None, "trigger": {"min_records": 10000, "max_delay": "2m", "poll": "10s"}})
    assert (cfg.airflow.schedule, cfg.airflow.trigger.min_records, cfg.airflow.trigger.max_delay,
            cfg.airflow.trigger.poll) == (None, 10000, 120.0, 10.0)
    assert _load(tmp_path, {"trigger": {"max_delay": "1.5h"}}).airflow.trigger.max_delay == 5400.0
    assert _load(tmp_path, {}).airflow.trigger is None  # hourly only, as before


@pytest.mark.parametrize("airflow, says", [
    ({"trigger": {"min_records": -5}}, "field 'airflow.trigger.min_records': Input should be greater than 0"),
    ({"trigger": {"min_records": 0}}, "field 'airflow.trigger.min_records'"),
    ({"trigger": {}}, "give min_records, max_delay or both"),
    ({"trigger": {"min_records": 10, "poll": "0.5s"}}, "field 'airflow.trigger.poll': Input should be greater than or "
                                                      "equal to 1"),
    ({"trigger": {"max_delay": "2 mins"}}, "field 'airflow.trigger.max_delay': Value error, '2 mins' is not a "
                                           "duration; write a number and a unit, s, m, h or d"),
    ({"trigger": {"max_delay": "2m", "pol": "1s"}}, "field 'airflow.trigger.pol': Extra inputs are not permitted"),
    ({"schedule": None}, "schedule is null and there is no trigger"),
    ({"trigger": {"min_records": True}}, "field 'airflow.trigger.min_records': Value error, must be a number, got true"),
    ({"trigger": {"max_delay": "5s", "poll": "10s"}}, "field 'airflow.trigger': Value error, max_delay (5 s) is "
                                                      "shorter than poll (10 s)"),
])
def test_a_bad_rule_is_a_config_error_naming_the_field_at_load(tmp_path, airflow, says):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, airflow)
    assert says in str(info.value) and "orders.yaml" in str(info.value), str(info.value)


class FakeAdmin:
    """The two calls ``waiting`` makes (partitions, then earliest/latest per partition)."""

    def __init__(self, ends: dict, earliest: dict | None = None, stamps: dict | None = None):
        self.ends, self.earliest, self.stamps, self.fetched = ends, earliest or {}, stamps or {}, []

    def partitions(self, topics=None, pattern=None):
        return set(self.ends)

    def offsets(self, tps):
        return {tp: PartitionOffsets(self.earliest.get(tp, 0), self.ends[tp]) for tp in tps}

    def timestamps_at(self, positions):
        self.fetched.append(dict(positions))
        return {tp: self.stamps[(tp, o)] for tp, o in positions.items() if (tp, o) in self.stamps}


class FakeLedger:
    def __init__(self, rows: dict):
        self.rows = rows

    def frontier_rows(self, name):
        return [{"topic": tp.topic, "partition": tp.partition, "next_offset": o} for tp, o in self.rows.items()]


def test_waiting_counts_past_the_frontier_and_from_the_starting_policy_where_there_is_none(tmp_path):
    cfg = Pipeline(_load(tmp_path, {"trigger": {"min_records": 1}}))
    seen = waiting(cfg, FakeLedger({A: 70}), FakeAdmin({A: 100, B: 40}, earliest={B: 10}))
    assert (seen.records, seen.starts) == (30 + 30, {A: 70, B: 10})  # B untracked: from its earliest
    assert waiting(cfg, None, FakeAdmin({A: 5})).records == 5  # no ledger yet
    latest = Pipeline(_load(tmp_path, {"trigger": {"min_records": 1}}, starting_policy="latest"))
    assert waiting(latest, FakeLedger({A: 70}), FakeAdmin({A: 100, B: 40})).starts == {A: 70}
    assert waiting(cfg, FakeLedger({A: 5}), FakeAdmin({A: 100}, earliest={A: 60})).records == 40  # retention passed it
    assert waiting(cfg, FakeLedger({A: 100}), FakeAdmin({A: 100})).records == 0
    # The first run records the starting offsets in a new ledger: the frontier did not move.
    assert waiting(cfg, None, FakeAdmin({A: 50})).frontier == waiting(cfg, FakeLedger({A: 0}), FakeAdmin({A: 50})).frontier
    assert waiting(cfg, FakeLedger({A: 20}), FakeAdmin({A: 50})).frontier == (("orders", 0, 20),)


def _seen(records: int, frontier: tuple = (("orders", 0, 0),), starts: dict | None = None) -> Waiting:
    return Waiting(records, starts if starts is not None else ({A: 0} if records else {}), frontier)


def test_the_count_fires_once_per_crossing_and_rearms_when_the_frontier_moves():
    watch = LagWatch(LagTriggerSettings(min_records=100))
    assert watch.decide(_seen(0), None, now=0) is None
    assert watch.decide(_seen(99), None, now=1) is None
    assert watch.decide(_seen(150), None, now=2) == "records"
    for t in range(3, 50):  # duplicate readings while the run is queued or running: nothing more
        assert watch.decide(_seen(150 + t), None, now=t) is None
    moved = (("orders", 0, 120),)
    assert watch.decide(_seen(130, moved), None, now=60) == "records"  # a burst over the caps: the next run
    assert watch.decide(_seen(10, (("orders", 0, 250),)), None, now=70) is None  # under the count: waits


def test_the_delay_fires_on_the_oldest_records_age_and_a_lost_firing_repeats_after_a_while():
    rule = LagTriggerSettings(min_records=1000, max_delay=60)
    watch = LagWatch(rule)
    assert not watch.needs_age(_seen(0), now=0)
    assert watch.needs_age(_seen(5), now=0)
    assert not watch.needs_age(_seen(5000), now=0)  # the count decides alone: no fetch
    assert watch.decide(_seen(5), 59.0, now=1) is None
    assert watch.decide(_seen(5), None, now=1) is None  # no timestamp read: the count may still decide
    assert watch.decide(_seen(5), 61.0, now=2) == "delay"
    assert not watch.needs_age(_seen(5), now=3)  # fired, frontier unmoved: no fetch either
    assert watch.decide(_seen(5), 200.0, now=3) is None
    assert watch.decide(_seen(5), 200.0, now=2 + REARM_AFTER_S) == "delay"  # its run never moved the frontier


def test_the_oldest_age_fetches_each_first_waiting_record_once():
    admin = FakeAdmin({A: 10, B: 10}, stamps={(A, 3): 1_000_000, (B, 7): 1_030_000})
    known: dict = {}
    assert oldest_age(admin, {A: 3, B: 7}, now_ms=1_090_000, known=known) == 90.0
    assert oldest_age(admin, {A: 3, B: 7}, now_ms=1_100_000, known=known) == 100.0
    assert admin.fetched == [{A: 3, B: 7}]  # the second poll fetched nothing
    future = FakeAdmin({A: 10}, stamps={(A, 4): 5_000_000})
    assert oldest_age(future, {A: 4}, now_ms=1_000_000, known=known) == 0.0  # stamped in the future: from now on
    assert oldest_age(future, {A: 4}, now_ms=1_045_000, known=known) == 45.0
    assert oldest_age(FakeAdmin({A: 1}), {A: 0}, now_ms=1, known={}) is None


def test_the_rule_reads_as_a_sentence():
    assert describe_rule(LagTriggerSettings(min_records=10000, max_delay=120, poll=10)) == \
        "a run starts when 10,000 records wait or the oldest waiting record has waited 2m (polled every 10s)"
    assert describe_rule(LagTriggerSettings(max_delay=90, poll=1.5)) == \
        "a run starts when the oldest waiting record has waited 90s (polled every 1.5s)"


def test_a_count_beyond_the_batch_cap_without_a_delay_is_refused_at_load(tmp_path):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, {"trigger": {"min_records": 2_000_000}}, caps={"max_records_per_batch": 1_000_000})
    assert ("airflow.trigger.min_records (2,000,000) is more than caps.max_records_per_batch (1,000,000), and there "
            "is no airflow.trigger.max_delay") in str(info.value)
    rule = _load(tmp_path, {"trigger": {"min_records": 2_000_000, "max_delay": "5m"}},  # the delay keeps it
                 caps={"max_records_per_batch": 1_000_000}).airflow.trigger
    assert (rule.min_records, rule.max_delay) == (2_000_000, 300.0)


@pytest.mark.parametrize("kafka, present, missing", [
    ({"topics": ["orders", "refunds"]}, {"orders"}, ["refunds"]),
    ({"topics": ["orders"]}, {"orders"}, []),
    ({"pattern": "orders-.*"}, set(), ["pattern orders-.*"]),
    ({"pattern": "orders-.*"}, {"orders-eu"}, []),
])
def test_missing_sources_names_each_absent_topic_or_a_pattern_that_matches_nothing(tmp_path, kafka, present, missing):
    pipeline = Pipeline(_load(tmp_path, {"trigger": {"min_records": 1}}, kafka=kafka))
    assert missing_sources(pipeline, present) == missing
    assert waiting(pipeline, None, FakeAdmin({TopicPartition(t, 0): 5 for t in present})).present == frozenset(present)
