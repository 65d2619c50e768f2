"""How ``airflow.trigger`` reaches Airflow: the DAG's schedule (the cron or the input asset, or
either), the watcher's trigger as Airflow serializes it, and the trigger's reading of its config
file as it changes or goes. The triggerer itself is in tests/integration/runs/test_lag_trigger.py."""

from __future__ import annotations

import logging

import yaml

from offsetbatch.dag.factory import pipeline_dag
from offsetbatch.dag.input_asset import input_asset_uri
from offsetbatch.dag.lag_trigger import LagTrigger, _Reader
from offsetbatch.model import TopicPartition

RULE = {"min_records": 1000, "max_delay": "2m", "poll": "5s"}


def _config(tmp_path, **airflow) -> str:
    doc = {"name": "orders", "kafka": {"topics": ["orders"]}, "sink": {"path": str(tmp_path / "t")},
           "ledger": {"url": f"sqlite:///{tmp_path}/ledger.db"}, "airflow": airflow}
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _watchers(dag) -> list:
    """(asset URI, watcher name, trigger) of every watcher the DAG's schedule has."""
    condition = dag.timetable.asset_condition
    assets = condition.objects if hasattr(condition, "objects") else [condition]
    return [(a.uri, w.name, w.trigger) for a in assets for w in a.watchers]


def test_the_cron_stays_a_fallback_next_to_the_lag_triggers_asset(tmp_path):
    from airflow.sdk.definitions.timetables.assets import AssetOrTimeSchedule

    path = _config(tmp_path, trigger=RULE)
    dag = pipeline_dag(path)
    assert isinstance(dag.timetable, AssetOrTimeSchedule)
    assert dag.timetable.timetable.summary == "0 * * * *"
    [(uri, name, trigger)] = _watchers(dag)
    assert (uri, name) == (input_asset_uri("orders"), "orders_waiting_records")
    assert trigger.serialize() == ("offsetbatch.dag.lag_trigger.LagTrigger",
                                   {"config_path": path, "min_records": 1000, "max_delay": 120.0, "poll": 5.0,
                                    "kafka_conn_id": "kafka_default", "isolation_level": "read_uncommitted"})
    classpath, kwargs = trigger.serialize()
    assert LagTrigger(**kwargs).serialize() == (classpath, kwargs)  # what the triggerer rebuilds


def test_without_a_cron_only_the_lag_trigger_starts_runs(tmp_path):
    dag = pipeline_dag(_config(tmp_path, schedule=None, trigger=RULE))
    assert [u for u, _, _ in _watchers(dag)] == [input_asset_uri("orders")]
    assert not hasattr(dag.timetable, "timetable")


def test_without_a_rule_the_dag_is_hourly_as_before(tmp_path):
    from airflow.timetables.interval import CronDataIntervalTimetable

    assert isinstance(pipeline_dag(_config(tmp_path)).timetable, CronDataIntervalTimetable)


def test_the_trigger_reads_its_config_again_when_it_changes_and_fires_nothing_while_it_is_gone(tmp_path, caplog):
    path = _config(tmp_path, trigger=RULE)
    reader = _Reader(path, logging.getLogger("lag"))
    assert reader._load() and reader.watch.rule.min_records == 1000
    _config(tmp_path, trigger={**RULE, "min_records": 50})
    reader.mtime = -2.0  # the same second: make the change visible whatever the file system's clock
    assert reader._load() and reader.watch.rule.min_records == 50
    (tmp_path / "orders.yaml").unlink()
    with caplog.at_level(logging.WARNING, logger="lag"):
        assert reader._load() is False and reader.poll() is None
    assert "pipeline orders: its config" in caplog.text and "is gone; the lag trigger fires nothing" in caplog.text
    _config(tmp_path, trigger=None)
    with caplog.at_level(logging.WARNING, logger="lag"):
        assert reader._load() is False
    assert "has no airflow.trigger any more" in caplog.text


def test_a_broker_or_ledger_that_does_not_answer_is_logged_and_polled_again_never_raised(tmp_path, monkeypatch,
                                                                                        capsys):
    """A trigger that raises stops watching for good (Airflow fails the watcher), so the loop logs
    the error and backs off (doubling, up to BACKOFF_MAX_S), then fires once the reading works."""
    import asyncio

    from offsetbatch.dag import lag_trigger

    readings = iter([ConnectionError("broker 127.0.0.1:9 refused"),
                     ConnectionError("ledger postgresql://ob:s3cret@db:5432/ledger refused"),
                     None, {"pipeline": "orders", "reason": "records"}])

    def poll(self):
        value = next(readings)
        if isinstance(value, Exception):
            raise value
        return value

    slept: list[float] = []

    async def sleep(seconds):
        slept.append(seconds)

    monkeypatch.setattr(lag_trigger._Reader, "poll", poll)
    monkeypatch.setattr(lag_trigger.asyncio, "sleep", sleep)
    trigger = LagTrigger(config_path=_config(tmp_path, trigger=RULE), min_records=1000, max_delay=120.0, poll=5.0)

    async def first_event():
        stream = trigger.run()
        try:
            return await stream.__anext__()
        finally:
            await stream.aclose()

    event = asyncio.run(first_event())
    assert event.payload == {"pipeline": "orders", "reason": "records"}
    assert slept == [10.0, 20.0, 5.0]  # backoff while failing, the poll interval once it reads again
    logged = capsys.readouterr().out  # the trigger's own logger (structlog, as in the triggerer)
    assert logged.count("pipeline orders: lag trigger could not read the waiting records (ConnectionError") == 2
    assert "trying again in 10 s" in logged and "trying again in 20 s" in logged
    assert "postgresql://ob:***@db:5432/ledger" in logged and "s3cret" not in logged  # a URL's password is kept out


def test_a_topic_that_does_not_exist_is_logged_once_per_change_not_every_poll(tmp_path, caplog):
    """The triggerer says why it never fires: the topic missing is one warning, however many polls
    (shared readings of a cluster that lacks it); its coming back is one line; a poll with the
    topic there says nothing of it."""
    from offsetbatch.dag.lag_trigger import ClusterReading
    from offsetbatch.plan.freshness import Interest
    from offsetbatch.source.admin import PartitionOffsets

    reader = _Reader(_config(tmp_path, trigger=RULE), logging.getLogger("lag"))
    covered = Interest(frozenset({"orders"}), frozenset())
    without = ClusterReading(at=0.0, covered=covered, offsets={})
    with_it = ClusterReading(at=0.0, covered=covered, offsets={TopicPartition("orders", 0): PartitionOffsets(0, 0)})
    with caplog.at_level(logging.INFO, logger="lag"):
        for reading in (without, without, without, with_it, with_it, without):
            assert reader.poll(reading) is None
    said = [r.getMessage() for r in caplog.records if "lag trigger: orders" in r.getMessage()]
    assert said == [
        "pipeline orders: lag trigger: orders does not exist on Kafka connection kafka_default: nothing waits there, "
        f"so it fires no run for them until they exist. Create them, or fix kafka.topics in {tmp_path}/orders.yaml",
        "pipeline orders: lag trigger: orders found again on Kafka connection kafka_default",
        "pipeline orders: lag trigger: orders does not exist on Kafka connection kafka_default: nothing waits there, "
        f"so it fires no run for them until they exist. Create them, or fix kafka.topics in {tmp_path}/orders.yaml",
    ]


def test_the_triggers_of_pipelines_on_one_ledger_database_share_one_engine(tmp_path):
    """A triggerer holding a hundred pipelines' triggers must not hold a hundred ledger engines
    (and their connections): readers on one ledger URL share one ``Ledger``; the last reset closes it."""
    from offsetbatch.ledger import Ledger, shared

    url = f"sqlite:///{tmp_path}/ledger.db"
    Ledger(url, create=True).dispose()
    readers = []
    for name in ("orders", "payments", "refunds"):
        doc = {"name": name, "kafka": {"topics": [name]}, "sink": {"path": str(tmp_path / name)},
               "ledger": {"url": url}, "airflow": {"trigger": RULE}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc))
        reader = _Reader(str(tmp_path / f"{name}.yaml"), logging.getLogger("lag"))
        assert reader._load()
        reader._open_ledger()
        readers.append(reader)
    assert readers[0].ledger is readers[1].ledger is readers[2].ledger and shared.users(url) == 3
    engine = readers[0].ledger.engine
    readers[0].reset()
    readers[1].reset()
    assert readers[0].ledger is None and shared.users(url) == 1 and readers[2].ledger.engine is engine
    readers[2].reset()
    assert shared.users(url) == 0
    readers[0]._open_ledger()  # opened again after the last went: a new engine
    assert readers[0].ledger.engine is not engine and shared.users(url) == 1
    readers[0].reset()
