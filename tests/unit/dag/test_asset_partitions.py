"""A batch's partition key: its interval's start in Airflow's temporal-mapper format, a replay's
its target's, none without an interval; and what goes on the asset event."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from offsetbatch.dag.asset_partitions import add_partitions, partition_key


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
        {"partition_key": "2026-10-05T04:00:00"}, {"partition_key": "2026-10-05T03:00:00"},
        {"partition_key": "2026-10-05T04:00:00"}]}
    assert add_partitions(event, result) == ["2026-10-05T03:00:00", "2026-10-05T04:00:00"]
    assert added == [["2026-10-05T03:00:00", "2026-10-05T04:00:00"]]
    assert add_partitions(event, {"pipeline": "p", "batch_ids": [6], "batches": [{"partition_key": None}]}) == []
    assert len(added) == 1
