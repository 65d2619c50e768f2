"""A batch's partition keys: its interval's start in Airflow's temporal-mapper format (a replay's:
its target's) and every hour its records span; and what goes on the asset event."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from offsetbatch.dag.asset_partitions import MAX_KEYS, add_partitions, partition_key, partition_keys


class Ledger:
    def __init__(self, batches: dict[int, SimpleNamespace]):
        self.batches = batches

    def get_batch(self, pipeline: str, batch_id: int) -> SimpleNamespace:
        return self.batches[batch_id]


def _batch(start: datetime | None, target: int | None = None) -> SimpleNamespace:
    return SimpleNamespace(target_batch_id=target, stats={"data_interval_start": start})


def test_keys_are_the_interval_start_in_utc_and_a_replay_takes_its_targets():
    east = timezone(timedelta(hours=2))
    ledger = Ledger({1: _batch(datetime(2026, 10, 5, 3)),  # naive: the ledger's UTC (SQLite)
                     2: _batch(datetime(2026, 10, 5, 6, tzinfo=east)),
                     3: _batch(datetime(2026, 11, 1, 9, tzinfo=timezone.utc), target=1),
                     4: _batch(None)})
    assert [partition_key(ledger, "p", i) for i in (1, 2, 3, 4)] == \
        ["2026-10-05T03:00:00", "2026-10-05T04:00:00", "2026-10-05T03:00:00", None]


def test_the_event_gets_each_committed_hour_once():
    added: list[list[str]] = []
    event = SimpleNamespace(add_partitions=added.append)
    result = {"pipeline": "p", "batch_ids": [3, 4, 5], "batches": [
        {"partition_keys": ["2026-10-05T04:00:00"]}, {"partition_keys": ["2026-10-05T03:00:00"]},
        {"partition_keys": ["2026-10-05T03:00:00", "2026-10-05T04:00:00"]}]}
    assert add_partitions(event, result) == ["2026-10-05T03:00:00", "2026-10-05T04:00:00"]
    assert added == [["2026-10-05T03:00:00", "2026-10-05T04:00:00"]]
    assert add_partitions(event, {"pipeline": "p", "batch_ids": [6], "batches": [{"partition_keys": []}]}) == []
    assert len(added) == 1


def _us(*args) -> int:
    return int(datetime(*args, tzinfo=timezone.utc).timestamp() * 1_000_000)


def test_a_batch_over_a_backlog_names_every_hour_its_records_span():
    """Issue 41, case 14: a first batch run at 12:00 that reads records of 10:00-12:59 emitted only
    12:00, and a partition-aware DAG reading "that hour" never saw 10:00 and 11:00."""
    ledger = Ledger({1: _batch(datetime(2026, 10, 5, 12)), 2: _batch(None), 3: _batch(datetime(2026, 11, 1, 9), 1)})
    span = (_us(2026, 10, 5, 10, 0, 3), _us(2026, 10, 5, 12, 59, 59))
    assert partition_keys(ledger, "p", 1, span) == ["2026-10-05T10:00:00", "2026-10-05T11:00:00", "2026-10-05T12:00:00"]
    assert partition_keys(ledger, "p", 2, span) == partition_keys(ledger, "p", 1, span)  # a run without an interval
    assert partition_keys(ledger, "p", 3, (_us(2026, 10, 5, 12, 1), _us(2026, 10, 5, 12, 2))) == ["2026-10-05T12:00:00"]
    assert partition_keys(ledger, "p", 2, None) == []
    month = partition_keys(ledger, "p", 2, (_us(2026, 1, 1), _us(2026, 10, 5, 12)))
    assert len(month) == MAX_KEYS and month[-1] == "2026-10-05T12:00:00"  # the newest hours of a long backlog
