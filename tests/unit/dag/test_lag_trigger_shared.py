"""Lag triggers of pipelines on one Kafka connection share one poll of the cluster (Airflow 3.3's
shared streams): run here through Airflow's own ``SharedStreamManager``, as the triggerer runs
them, with an in-memory stand-in for the admin client's three calls (the logic under test is the
sharing; the real triggerer and broker are in tests/integration/runs/test_lag_trigger.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest
import yaml
from airflow.triggers.shared_stream import SharedStreamManager

from offsetbatch.dag import lag_trigger
from offsetbatch.dag.lag_trigger import LagTrigger
from offsetbatch.model import TopicPartition
from offsetbatch.source.admin import PartitionOffsets

ORDERS, PAY_EU, PAY_US, OTHER = (TopicPartition("orders", 0), TopicPartition("pay-eu", 0),
                                 TopicPartition("pay-us", 0), TopicPartition("audit", 0))


class Cluster:
    """The admin calls of one shared poll: topics by pattern, partitions, earliest/latest."""

    def __init__(self) -> None:
        self.ends = {ORDERS: 150, PAY_EU: 10, PAY_US: 0, OTHER: 999}
        self.clients = 0
        self.offset_calls: list[set[TopicPartition]] = []
        self.down = False

    def connect(self, conn_id: str, isolation_level: str) -> "Cluster":
        assert (conn_id, isolation_level) == ("kafka_default", "read_uncommitted")
        self.clients += 1
        return self

    def topics_matching(self, patterns) -> set[str]:
        import re

        return {tp.topic for tp in self.ends if any(re.fullmatch(p, tp.topic) for p in patterns)}

    def partitions(self, topics=None, pattern=None) -> set[TopicPartition]:
        if self.down:
            raise ConnectionError("broker 127.0.0.1:9 refused")
        return {tp for tp in self.ends if tp.topic in topics}

    def offsets(self, tps) -> dict[TopicPartition, PartitionOffsets]:
        self.offset_calls.append(set(tps))
        return {tp: PartitionOffsets(0, self.ends[tp]) for tp in tps}

    def close(self) -> None:
        pass


def _config(tmp_path, name: str, kafka: dict, min_records: int) -> str:
    doc = {"name": name, "kafka": kafka, "sink": {"path": str(tmp_path / name)},
           "ledger": {"url": f"sqlite:///{tmp_path}/{name}-ledger.db"},  # none yet: before the first run
           "airflow": {"trigger": {"min_records": min_records, "poll": "1s"}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _triggers(tmp_path) -> tuple[LagTrigger, LagTrigger]:
    from offsetbatch.dag.factory import pipeline_dag

    triggers = []
    for name, kafka, count in (("orders", {"topics": ["orders"]}, 100), ("payments", {"pattern": "pay-.*"}, 50)):
        dag = pipeline_dag(_config(tmp_path, name, kafka, count))
        [asset] = [dag.timetable.asset_condition] if not hasattr(dag.timetable.asset_condition, "objects") \
            else dag.timetable.asset_condition.objects
        triggers.append(asset.watchers[0].trigger)
    return triggers[0], triggers[1]


@contextlib.asynccontextmanager
async def _subscribed(*triggers: LagTrigger):
    """Each trigger's event stream, subscribed through Airflow's ``SharedStreamManager`` as the
    triggerer does; unsubscribed and the shared poll stopped on the way out."""
    manager = SharedStreamManager()
    key = triggers[0].shared_stream_key()
    streams = [t.filter_shared_stream(manager.subscribe(trigger_id=i, trigger=t, key=key))
               for i, t in enumerate(triggers)]
    try:
        yield streams
    finally:
        for i, stream in enumerate(streams):
            await stream.aclose()
            await manager.unsubscribe(i, key)
        await manager.stop_all()


def test_the_dag_gives_its_trigger_the_connection_so_pipelines_on_one_cluster_share_a_key(tmp_path):
    orders, payments = _triggers(tmp_path)
    assert orders.shared_stream_key() == payments.shared_stream_key() is not None
    classpath, kwargs = orders.serialize()
    assert LagTrigger(**kwargs).shared_stream_key() == orders.shared_stream_key()  # as the triggerer rebuilds it
    for other in ({"kafka_conn_id": "kafka_eu"}, {"isolation_level": "read_committed"}, {"poll": 5.0}):
        assert LagTrigger(**{**kwargs, **other}).shared_stream_key() != orders.shared_stream_key(), other
    # serialized before the connection was part of it: polls alone, as it did
    old = {k: v for k, v in kwargs.items() if k not in ("kafka_conn_id", "isolation_level")}
    assert LagTrigger(**old).shared_stream_key() is None


def test_one_poll_reads_every_pipelines_topics_and_each_trigger_decides_on_its_own(tmp_path, monkeypatch):
    """Two pipelines (named topic, pattern) on one connection: one admin client, one offsets
    request per poll covering both pipelines' partitions and no other; each trigger fires on its
    own rule (orders: 150 waiting >= 100 at once; payments: only after pay-eu grows to 60 >= 50)."""
    cluster = Cluster()
    monkeypatch.setattr("offsetbatch.source.admin.KafkaAdmin.for_connection", cluster.connect)
    orders, payments = _triggers(tmp_path)
    key = orders.shared_stream_key()

    async def scenario():
        async with _subscribed(orders, payments) as (orders_events, payments_events):
            fired_orders = await asyncio.wait_for(orders_events.__anext__(), 15)
            payments_next = asyncio.ensure_future(payments_events.__anext__())
            await asyncio.sleep(2.5)  # two more polls: payments (10 waiting) must not fire
            assert not payments_next.done()
            polls_before = len(cluster.offset_calls)
            cluster.ends[PAY_EU] = 60
            fired_payments = await asyncio.wait_for(payments_next, 15)
            return fired_orders.payload, fired_payments.payload, polls_before

    fired_orders, fired_payments, polls_before = asyncio.run(scenario())
    assert (fired_orders["pipeline"], fired_orders["reason"], fired_orders["waiting_records"]) == ("orders", "records", 150)
    assert (fired_payments["pipeline"], fired_payments["waiting_records"]) == ("payments", 60)
    assert cluster.clients == 1
    both = {ORDERS, PAY_EU, PAY_US}
    shared = [tps for tps in cluster.offset_calls if tps == both]
    assert len(shared) >= 3 and polls_before >= 3, cluster.offset_calls  # once both had joined: one request a poll
    assert all(tps <= both for tps in cluster.offset_calls), cluster.offset_calls  # audit: no pipeline reads it
    assert lag_trigger._INTERESTS.get(key, {}) == {}  # both left: the poll reads nothing for them any more


def test_a_cluster_that_does_not_answer_is_logged_by_each_pipeline_and_nothing_raises(tmp_path, monkeypatch, capsys):
    """The shared poll never raises (Airflow would fail every trigger sharing it): each trigger logs
    its pipeline's warning with the backoff, and fires once the cluster answers again."""
    cluster = Cluster()
    cluster.down = True
    monkeypatch.setattr("offsetbatch.source.admin.KafkaAdmin.for_connection", cluster.connect)
    monkeypatch.setattr(lag_trigger, "BACKOFF_MAX_S", 2.0)
    orders, _ = _triggers(tmp_path)

    async def scenario():
        async with _subscribed(orders) as (events,):
            fired = asyncio.ensure_future(events.__anext__())
            await asyncio.sleep(4)
            assert not fired.done()
            cluster.down = False
            return (await asyncio.wait_for(fired, 15)).payload

    assert asyncio.run(scenario())["waiting_records"] == 150
    logged = capsys.readouterr().out
    assert "pipeline orders: lag trigger could not read the waiting records (ConnectionError: broker 127.0.0.1:9 " \
           "refused); trying again in 2 s" in logged, logged[-2000:]
    assert cluster.clients >= 2  # a failed client is closed and opened again


@pytest.mark.parametrize("gone", ["file", "rule"])
def test_a_pipeline_whose_config_goes_leaves_the_shared_poll_and_joins_again_when_it_is_back(tmp_path, monkeypatch,
                                                                                            gone):
    cluster = Cluster()
    monkeypatch.setattr("offsetbatch.source.admin.KafkaAdmin.for_connection", cluster.connect)
    orders, _ = _triggers(tmp_path)
    key = orders.shared_stream_key()
    path = tmp_path / "orders.yaml"
    original = path.read_text()
    if gone == "file":
        path.unlink()
    else:
        path.write_text(yaml.safe_dump({**yaml.safe_load(original), "airflow": {}}))  # hourly only now

    async def scenario():
        async with _subscribed(orders) as (events,):
            fired = asyncio.ensure_future(events.__anext__())
            await asyncio.sleep(2.5)
            assert not fired.done() and lag_trigger._INTERESTS.get(key, {}) == {}
            assert not any(ORDERS in tps for tps in cluster.offset_calls)
            path.write_text(original)
            os.utime(path, (1, 1))  # a new mtime whatever the file system's clock resolution
            return (await asyncio.wait_for(fired, 15)).payload

    assert asyncio.run(scenario())["waiting_records"] == 150


def test_a_pipeline_whose_ledger_does_not_answer_backs_off_and_the_others_on_its_poll_still_fire(tmp_path, monkeypatch,
                                                                                                capsys):
    """One pipeline's ledger unreachable (a PostgreSQL port nothing listens on): it logs why with
    the backoff of a lone trigger (doubling, not a warning per poll), never raises, and the other
    pipeline sharing the poll fires as before."""
    cluster = Cluster()
    cluster.ends[PAY_EU] = 60
    monkeypatch.setattr("offsetbatch.source.admin.KafkaAdmin.for_connection", cluster.connect)
    orders, payments = _triggers(tmp_path)
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()),
                                    "ledger": {"url": "postgresql+psycopg2://ob:s3cret@127.0.0.1:9/ledger"}}))

    async def scenario():
        async with _subscribed(orders, payments) as (orders_events, payments_events):
            fired = await asyncio.wait_for(payments_events.__anext__(), 15)
            orders_next = asyncio.ensure_future(orders_events.__anext__())
            await asyncio.sleep(6.5)  # about 6 polls of 1 s
            assert not orders_next.done()
            orders_next.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await orders_next
            return fired.payload

    assert asyncio.run(scenario())["pipeline"] == "payments"
    logged = capsys.readouterr().out
    warnings = [line for line in logged.splitlines() if "pipeline orders: lag trigger could not read" in line]
    assert 2 <= len(warnings) <= 4, warnings  # backing off 2, 4, 8 s, not one warning per 1 s poll
    assert "trying again in 2 s" in warnings[0] and "trying again in 4 s" in warnings[1], warnings
    assert "s3cret" not in logged
